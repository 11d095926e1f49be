from agents.acks import AckTracker


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
