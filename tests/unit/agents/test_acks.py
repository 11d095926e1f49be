from slipstream.agents.acks import AckTracker


def test_acks_only_the_done_prefix_of_each_partition():
    t = AckTracker()
    for off in (10, 11, 12):
        t.read("p0", off, f"e{off}")
    t.read("p1", 5, "x5")
    assert t.done("p0", 11) == []  # 10 is not done: acking 11 could let a commit skip 10
    assert t.done("p1", 5) == ["x5"]
    assert t.done("p0", 10) == ["e10", "e11"]
    assert t.unfinished() == 1
    assert t.done("p0", 12) == ["e12"]
    assert t.committable({"p0", "p1", "p9"}) == {"p0": 13, "p1": 6}


def test_forget_revoked_partitions():
    t = AckTracker()
    t.read("p0", 1, "a")
    t.read("p0", 2, "b")
    t.done("p0", 2)
    assert t.forget({"p0"}) == 1
    assert t.done("p0", 1) == []  # revoked: the new owner handles it


def test_outputs_are_released_only_with_the_offset_that_passes_their_input():
    """Exactly-once: an output may become visible only in the transaction whose committed offset
    passes its input, so a window finishing before an earlier one of its partition waits for it."""
    t = AckTracker()
    for off in (10, 11, 12):
        t.read("p0", off, f"e{off}")
    t.attach("p0", 11, ["r11a", "r11b"])
    t.attach("p0", 12, ["r12"])
    assert t.release([("p0", 11), ("p0", 12)]) == []  # 10 still open: 11 and 12 must wait
    t.attach("p0", 10, ["r10"])
    (r,) = t.release([("p0", 10)])
    assert (r.tp, r.events, r.outputs, r.next_offset) == ("p0", ["e10", "e11", "e12"],
                                                          ["r10", "r11a", "r11b", "r12"], 13)
    assert t.release([("p0", 10)]) == []  # released once


def test_release_is_per_partition_and_ignores_revoked_inputs():
    t = AckTracker()
    t.read("p0", 1, "a")
    t.read("p1", 7, "b")
    t.attach("p1", 7, ["x"])
    t.forget({"p1"})
    t.attach("p1", 7, ["late"])  # revoked meanwhile: its new owner makes the output again
    assert t.release([("p1", 7)]) == []
    t.attach("p0", 1, ["y"])
    (r,) = t.release([("p0", 1), ("p1", 7)])
    assert (r.tp, r.outputs, r.next_offset) == ("p0", ["y"], 2)


def test_read_many_tracks_a_fetch_like_reads_one_by_one():
    class R:
        def __init__(self, offset):
            self.offset = offset

    t = AckTracker()
    fetch = [R(3), R(4), R(5)]
    t.read_many("p0", fetch)
    assert t.done_many([("p0", 4), ("p0", 3)]) == fetch[:2]
    assert t.unfinished() == 1 and t.committable({"p0"}) == {"p0": 5}


def test_gaps_in_offsets_do_not_hold_the_prefix():
    """Offsets need not be contiguous (transaction markers, compaction): the prefix is of offsets read."""
    t = AckTracker()
    for off in (10, 12, 15):
        t.read("p0", off, off)
    assert t.done_many([("p0", 12), ("p0", 10)]) == [10, 12]
    assert t.committable({"p0"}) == {"p0": 13}
    assert t.done("p0", 15) == [15] and t.committable({"p0"}) == {"p0": 16}


def test_an_offset_read_again_is_pending_again_in_its_first_place():
    """A seek back can hand over offsets already read and not yet passed: each is tracked once, in its
    first place, and must be done (again) before the prefix passes it; the prefix never sticks on a
    second copy."""
    t = AckTracker()
    for off in (1, 2, 3):
        t.read("p0", off, f"a{off}")
    assert t.done("p0", 2) == []  # 1 still open
    t.read_many("p0", [_R(2), _R(3), _R(4)], ["b2", "b3", "b4"])  # seek back to 2
    assert t.unfinished() == 4
    assert t.done("p0", 1) == ["a1"]  # 2 is pending again
    assert t.done_many([("p0", 3), ("p0", 4)]) == []
    assert t.done("p0", 2) == ["b2", "b3", "b4"]
    assert t.unfinished() == 0 and t.committable({"p0"}) == {"p0": 5}


class _R:
    def __init__(self, offset):
        self.offset = offset
