from slipstream.streams.latency import LatencyCurve, RecentLatency

MS = 1_000_000


def test_quadratic_fit_recovers_curve_and_keeps_measured_points():
    pts = {b: 0.5 * b * b + 2 * b + 10 for b in (1, 2, 4, 8)}
    c = LatencyCurve.fit(pts)
    assert c.kind == "quadratic"
    assert abs(c.ms(16) - (0.5 * 256 + 32 + 10)) < 1e-6
    assert c.ms(4) == pts[4]


def test_linear_fallback_and_constant():
    assert LatencyCurve.fit({1: 10, 2: 14}).kind == "linear"
    c = LatencyCurve.fit({4: 20})
    assert c.kind == "constant" and c.ms(8) == 20


def test_fit_never_predicts_faster_than_a_smaller_measured_batch():
    c = LatencyCurve.fit({1: 10, 2: 30, 4: 31, 8: 33})
    assert c.ms(16) >= 33


def test_recent_latency_uses_high_percentile_and_scales_unseen_sizes():
    r = RecentLatency(LatencyCurve.fit({1: 10, 4: 20}), window=5)
    assert r.predict_ns(1) == 10 * MS
    for v in (11, 12, 30, 11, 12):
        r.observe(1, v * MS)
    assert r.predict_ns(1) == 30 * MS  # the max of 5 is their p99
    # batch 4 never seen: profile (20 ms) scaled by the median observed/profile ratio (1.2)
    assert r.predict_ns(4) == int(20 * MS * 1.2)
    for v in (1, 1, 1, 1, 1, 1):
        r.observe(1, v * MS)
    assert r.predict_ns(1) == 1 * MS  # old measurements age out of the window


def test_unseen_size_scale_is_numpys_median_of_the_ratios():
    """The scale is the median of the recent ratios exactly as numpy computes it (the mean of the
    two middle ones for an even count), so swapping the implementation changes no prediction."""
    import random

    import numpy as np

    rng = random.Random(3)
    curve = LatencyCurve.fit({1: 2.0, 8: 9.0})
    for n in (1, 2, 7, 32, 40):
        r = RecentLatency(curve)
        for _ in range(n):
            b = rng.choice((1, 8))
            r.observe(b, int(curve.ns(b) * rng.uniform(0.5, 3.0)))
        scale = float(np.median(r._ratios))
        assert r.predict_ns(5) == int(curve.ns(5) * scale)


def test_a_lone_stall_is_not_taken_for_the_pace():
    """One run far slower than the others (a preempted thread) would have the predictor call every
    queued request late for the whole horizon: it is held back, and a normal next run discards it. A
    slow run within the host's ordinary tail still counts at once."""
    r = RecentLatency(LatencyCurve.fit({1: 30, 4: 60}))
    for v in (34, 30, 36, 161, 33, 210, 35):  # lite0 on a busy 2-core host: median 34, tail to 210
        r.observe(1, v * MS)
    assert r.predict_ns(1) == 210 * MS
    r.observe(1, 577 * MS)
    assert r.predict_ns(1) == 210 * MS
    r.observe(1, 34 * MS)
    r.observe(1, 560 * MS)  # a second stall, not right after the first: held back again
    assert r.predict_ns(1) == 210 * MS
    assert r.predict_ns(4) == int(60 * MS * 34.5 / 30)  # nor do stalls move the scale of unseen sizes


def test_a_stall_confirmed_by_the_next_run_is_the_pace_until_the_stage_idles():
    """Two slow runs in a row are the pace. A pace past the SLO stops every run (each queued request
    is called late), so nothing would correct it: once the size has not run for the idle time its runs
    are forgotten and the profile speaks again; while it runs, the horizon ages them out."""
    now = [0]
    r = RecentLatency(LatencyCurve.fit({1: 25, 4: 60}), clock=lambda: now[0], horizon_s=5.0, idle_s=1.0)
    for v in (25, 26, 24, 25, 26, 428, 431):
        r.observe(1, v * MS)
        now[0] += 100 * MS
    assert r.predict_ns(1) == 431 * MS
    now[0] += 800 * MS
    assert r.predict_ns(1) == 431 * MS  # 0.9 s since the last run: still the stall
    now[0] += 200 * MS
    assert r.predict_ns(1) < 100 * MS  # idle past 1 s: the profile x the median ratio of the runs seen
    r.observe(1, 30 * MS)
    assert r.predict_ns(1) == 30 * MS
    for _ in range(60):  # running every 0.1 s: only the runs of the last 5 s count
        now[0] += 100 * MS
        r.observe(1, 40 * MS)
    assert r.predict_ns(1) == 40 * MS
