import pytest

from slipstream.agents.stage.serve import check_all, check_and_run


class Checked:
    def check(self, payload: bytes) -> str | None:
        return None if payload.startswith(b"ok") else "not ok"


class Unchecked:
    pass


def test_check_all_runs_the_executors_check_per_item():
    assert check_all(Checked(), [b"ok1", b"bad", b"ok2"]) == [None, "not ok", None]
    assert check_all(Unchecked(), [b"x", b"y"]) == [None, None]


class Doubler(Checked):
    variant = "double"

    def __init__(self, extra: int = 0) -> None:
        self.runs, self.extra = [], extra

    def run(self, payloads):
        self.runs.append(list(payloads))
        return [p * 2 for p in payloads] + [b"?"] * self.extra


def test_check_and_run_runs_the_model_once_on_the_items_that_pass():
    ex = Doubler()
    assert check_and_run(ex, [b"ok1", b"bad", b"ok2"]) == ([None, "not ok", None], [b"ok1ok1", b"ok2ok2"])
    assert check_and_run(ex, [b"bad"]) == (["not ok"], [])
    assert ex.runs == [[b"ok1", b"ok2"]]  # one run per call, none when nothing passed


def test_check_and_run_refuses_a_wrong_number_of_outputs():
    with pytest.raises(RuntimeError, match="double returned 2 outputs for 1 inputs"):
        check_and_run(Doubler(extra=1), [b"ok"])


class PoisonedModel(Doubler):
    """Fails on any batch holding the poisoned payload (a bug in the model, not a refused input)."""

    def run(self, payloads):
        if b"ok-poison" in payloads:
            raise ValueError("cannot digest this")
        return super().run(payloads)


def test_a_batch_the_model_fails_on_runs_again_item_by_item_and_only_the_offender_fails():
    ex = PoisonedModel()
    bad, outs = check_and_run(ex, [b"ok1", b"ok-poison", b"bad", b"ok2"])
    assert bad[0] is None and bad[2] == "not ok" and bad[3] is None
    assert "alone" in bad[1] and "cannot digest this" in bad[1]
    assert outs == [b"ok1ok1", b"ok2ok2"]
    with pytest.raises(ValueError, match="cannot digest"):  # alone in its batch: the model error as before
        check_and_run(ex, [b"ok-poison"])


class OnePass(Doubler):
    """An executor that checks each payload as it decodes it for the batch (``run_checked``): its
    ``check`` and ``run`` would decode a payload a second time."""

    def run_checked(self, payloads):
        self.runs.append(list(payloads))
        if b"ok-poison" in payloads:
            raise ValueError("cannot digest this")
        bad = [None if p.startswith(b"ok") else "not ok" for p in payloads]
        return bad, [p * 2 for p, why in zip(payloads, bad) if why is None] + [b"?"] * self.extra

    def check(self, payload):
        raise AssertionError("decoded twice: checked before the run")

    def run(self, payloads):
        raise AssertionError("decoded twice: run after the check")


def test_check_and_run_decodes_once_when_the_executor_checks_as_it_runs():
    ex = OnePass()
    assert check_and_run(ex, [b"ok1", b"bad", b"ok2"]) == ([None, "not ok", None], [b"ok1ok1", b"ok2ok2"])
    assert ex.runs == [[b"ok1", b"bad", b"ok2"]]
    with pytest.raises(RuntimeError, match="double returned 2 outputs for 1 inputs"):
        check_and_run(OnePass(extra=1), [b"ok"])
    bad, outs = check_and_run(ex, [b"ok1", b"ok-poison", b"bad"])  # the batch fails: item by item
    assert bad[0] is None and "alone" in bad[1] and bad[2] == "not ok" and outs == [b"ok1ok1"]
