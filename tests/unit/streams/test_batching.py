"""The shared batching/drop policy (slipstream.streams.batching): what the agents and the estimator both run."""
from slipstream.streams.batching import BatchSettings, decide, ready, window_size, flush_due_ns

MS = 1_000_000
S = BatchSettings.from_ms(max_batch=4, batch_timeout_ms=10)


def linear(b: int) -> int:  # 10 ms + 5 ms per item
    return (10 + 5 * b) * MS


def test_ready_on_full_queue_or_timeout_of_oldest():
    assert not ready(0, None, 0, S)
    assert ready(4, 0, 0, S)  # full
    assert not ready(3, 0, 9 * MS, S)
    assert ready(3, 0, 10 * MS, S)  # oldest waited the timeout
    assert flush_due_ns(5 * MS, S) == 15 * MS
    assert window_size(9, S) == 4 and window_size(2, S) == 2


def test_everything_runs_when_deadlines_are_loose():
    d = decide([10**12] * 4, 0, linear, S)
    assert d.run == (0, 1, 2, 3) and d.drop == () and d.defer == ()
    assert d.predicted_ns == linear(4) and d.finish_ns == linear(4)


def test_doomed_requests_are_dropped_not_run_late():
    # request 1 cannot finish even alone (15 ms): dropped; the rest run
    d = decide([100 * MS, 14 * MS, 100 * MS], 0, linear, S)
    assert d.drop == (1,)
    assert d.run == (0, 2)


def test_batch_shrinks_to_save_the_earliest_deadline():
    # batch of 3 takes 25 ms but request 0 must finish by 22 ms: run 2 (20 ms), defer the third
    d = decide([22 * MS, 100 * MS, 100 * MS], 0, linear, S)
    assert d.run == (0, 1) and d.defer == (2,) and d.drop == ()


def test_nothing_live_runs_nothing():
    d = decide([1 * MS, 2 * MS], 0, linear, S)
    assert d.run == () and d.drop == (0, 1) and d.predicted_ns == 0


def test_drop_late_off_runs_everything():
    s = BatchSettings.from_ms(4, 10, drop_late=False)
    d = decide([1 * MS, 2 * MS], 0, linear, s)
    assert d.run == (0, 1) and d.drop == ()


def test_settings_validate():
    import pytest
    with pytest.raises(ValueError, match="max_batch"):
        BatchSettings(0, 1)


def reference_decide(deadlines, now, predict):
    """The policy written out plainly: drop what cannot finish alone, run the largest FIFO prefix of
    the rest whose earliest deadline the batch meets."""
    alone = now + predict(1)
    drop = tuple(i for i, d in enumerate(deadlines) if d < alone)
    live = [i for i, d in enumerate(deadlines) if d >= alone]
    for b in range(len(live), 0, -1):
        if min(deadlines[i] for i in live[:b]) >= now + predict(b):
            return tuple(live[:b]), drop, tuple(live[b:])
    return (), drop, ()


def test_decide_matches_the_plain_reference_on_random_windows():
    import random
    rng = random.Random(7)
    for _ in range(2000):
        n = rng.randint(1, 8)
        deadlines = [rng.randint(0, 120) * MS for _ in range(n)]
        per_item = rng.randint(0, 10)
        d = decide(deadlines, 0, lambda b: (10 + per_item * b) * MS, S)
        assert (d.run, d.drop, d.defer) == reference_decide(deadlines, 0, lambda b: (10 + per_item * b) * MS)


def test_whole_ns_is_decides_whole_window_case_on_random_windows():
    """The shared fast path (the estimator's per-window call) agrees with decide and the reference on
    random windows, times and predictors, non-monotone ones (a measured profile can be) included."""
    import random
    from slipstream.streams.batching import whole_ns
    rng = random.Random(11)
    for _ in range(5000):
        n = rng.randint(1, 8)
        now = rng.randint(0, 50) * MS
        deadlines = [rng.randint(0, 150) * MS for _ in range(n)]
        table = [0] + [rng.randint(1, 60) * MS for _ in range(8)]
        if rng.random() < 0.5:
            table = sorted(table)
        s = BatchSettings.from_ms(8, 10, drop_late=rng.random() < 0.9)
        d = decide(deadlines, now, table.__getitem__, s)
        lat = whole_ns(deadlines, now, table.__getitem__, s)
        assert (lat >= 0) == (d.run == tuple(range(n))), (deadlines, now, table)
        assert lat < 0 or (lat, now + lat) == (d.predicted_ns, d.finish_ns)
        if s.drop_late:
            assert (d.run, d.drop, d.defer) == reference_decide(deadlines, now, table.__getitem__)


def test_served_within_counts_full_windows_finished_by_window_plus_budget():
    import pytest

    from slipstream.streams.batching import served_within

    ms = 1_000_000
    # batches of 4 every 50 ms after a 10 ms timeout: by 100 + 200 - 10 = 290 ms, 5 windows = 20 items
    assert served_within(100 * ms, 200 * ms, 4, 50 * ms, 10 * ms) == 20
    assert served_within(100 * ms, 160 * ms, 4, 50 * ms, 10 * ms) == 20  # 250 ms: exactly 5
    assert served_within(100 * ms, 159 * ms, 4, 50 * ms, 10 * ms) == 16
    assert served_within(0, 40 * ms, 1, 50 * ms, 0) == 0  # a batch longer than the budget serves none
    with pytest.raises(ValueError):
        served_within(0, 0, 0, 1, 0)
