import pytest

from agents.worker import check_all, check_and_run


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
