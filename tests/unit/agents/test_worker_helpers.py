from agents.worker import check_all


class Checked:
    def check(self, payload: bytes) -> str | None:
        return None if payload.startswith(b"ok") else "not ok"


class Unchecked:
    pass


def test_check_all_runs_the_executors_check_per_item():
    assert check_all(Checked(), [b"ok1", b"bad", b"ok2"]) == [None, "not ok", None]
    assert check_all(Unchecked(), [b"x", b"y"]) == [None, None]
