import pytest

from slipstream.agents.join import Joiner
from slipstream.schemas.records import InferenceResult

T = 1_000_000_000  # 1 s in ns


def frag(rid: str, share: str, path: list[str], status: str = "done", deadline_ns: int = 10 * T) -> InferenceResult:
    return InferenceResult(request_id=rid, pipeline="p", status=status, created_ns=0, deadline_ns=deadline_ns,
                           finished_ns=1, content_type="text/plain", output=b"x", fragment=share, path=tuple(path))


def test_fragments_join_once_and_duplicates_are_ignored():
    j = Joiner(timeout_ns=T)
    assert j.add(frag("r", "1/2", ["a:0/2"]), 2) is None
    assert j.add(frag("r", "1/2", ["a:0/2"]), 3) is None  # redelivered: same path
    res = j.add(frag("r", "1/2", ["a:1/2"]), 4)
    assert res.status == "done" and res.parts == 2 and not j.holds("r")


def test_a_fragment_of_a_closed_request_opens_no_second_result():
    j = Joiner(timeout_ns=T, remember_closed_ns=5 * T)
    j.add(frag("r", "1/2", ["a:0/2"]), 0)
    assert j.add(frag("r", "1/2", ["a:1/2"]), 0) is not None
    assert j.add(frag("r", "1/2", ["a:1/2"]), 1) is None and not j.holds("r")  # redelivered after close
    assert j.expire(100 * T) == []  # nothing left open to time out as a second result
    j.add(frag("r", "1/2", ["a:1/2"]), 101 * T)  # forgotten after remember_closed_ns: opens again
    assert j.holds("r")


def test_shares_over_one_close_the_request_as_error_instead_of_raising():
    j = Joiner(timeout_ns=T)
    j.add(frag("r", "1/2", ["a:0/2"]), 0)
    j.add(frag("r", "1/3", ["a:0/3"]), 0)  # a different fan-out of the same request
    res = j.add(frag("r", "1/3", ["a:1/3"]), 0)
    assert res.status == "error" and "7/6 > 1" in res.reason and not j.holds("r")


@pytest.mark.parametrize("share", ["x", "0", "3/2", "1/0"])
def test_a_share_that_is_no_fraction_in_0_1_raises_and_changes_nothing(share):
    j = Joiner(timeout_ns=T)
    with pytest.raises(ValueError, match="request r"):
        j.add(frag("r", share, ["a:0/2"]), 0)
    assert not j.holds("r") and j.expire(100 * T) == []


def test_incomplete_request_times_out_as_dropped_and_forget_drops_without_result():
    j = Joiner(timeout_ns=T)
    j.add(frag("r", "1/2", ["a:0/2"], deadline_ns=T), 0)
    j.add(frag("s", "1/2", ["a:0/2"], deadline_ns=T), 0)
    j.forget(["s"])
    assert j.expire(T + T // 2) == []  # not yet timed out
    (res,) = j.expire(3 * T)
    assert res.request_id == "r" and res.status == "dropped" and "1/2 of the request" in res.reason


def test_a_reopened_request_joins_again_from_its_fragments_read_again():
    # exactly-once: its result did not commit, so its partition is read again from before its fragments
    j = Joiner(timeout_ns=T)
    j.add(frag("r", "1/2", ["a:0/2"]), 0)
    assert j.add(frag("r", "1/2", ["a:1/2"]), 0) is not None
    assert j.add(frag("r", "1/2", ["a:0/2"]), 1) is None  # closed: ignored
    j.reopen(["r", "never-seen"])
    assert j.add(frag("r", "1/2", ["a:0/2"]), 2) is None and j.holds("r")
    assert j.add(frag("r", "1/2", ["a:1/2"]), 3).status == "done"


def test_requests_answered_before_a_restart_are_remembered_from_the_results_and_late_fragments_ignored():
    j = Joiner(timeout_ns=T, remember_closed_ns=60 * T)  # a fresh join after a restart: no memory of its own
    j.add(frag("open", "1/2", ["a:0/2"]), 0)
    j.remember([("r", 3 * T), ("s", 1 * T), ("open", 2 * T)])  # read back from the results topic
    assert j.add(frag("r", "1/2", ["a:1/2"]), 4 * T) is None and not j.holds("r")  # late: ignored
    assert j.holds("open")  # still open here: its own result is not written yet
    assert j.add(frag("open", "1/2", ["a:1/2"]), 5 * T).status == "done"
    assert j.expire(60 * T) == [] and j.add(frag("s", "1", []), 60 * T) is None  # within 60 s of its result
    j.expire(64 * T)
    assert j.add(frag("r", "1", []), 64 * T) is not None  # forgotten after remember_closed_ns: answered anew


def test_the_default_memory_outlives_a_late_fragment_by_minutes():
    j = Joiner(timeout_ns=T)
    j.add(frag("r", "1", []), 0)
    j.expire(10 * 60 * T)
    assert j.add(frag("r", "1", []), 10 * 60 * T) is None


def test_the_memory_of_closed_requests_is_bounded_by_count_oldest_forgotten_first():
    j = Joiner(timeout_ns=T, max_closed=2)
    for i, rid in enumerate(["a", "b", "c"]):
        j.add(frag(rid, "1", []), i)  # each closes at once
    j.remember([("d", 0)])  # read back from the results topic: older than every one closed here
    assert j.add(frag("a", "1", []), 5) is not None  # the oldest forgotten: it opens (and closes) again
    assert j.add(frag("c", "1", []), 5) is None  # the newest kept
    with pytest.raises(ValueError, match="max_closed=0"):
        Joiner(timeout_ns=T, max_closed=0)
