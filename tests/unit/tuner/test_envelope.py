"""Envelopes: the batch function and the live tracker agree with brute force and with each other."""
from __future__ import annotations

import numpy as np
import pytest

from slipstream.tuner.envelope import NS_PER_S, EnvelopeTracker, doubling_windows, envelope


def brute_force(arrivals_s: np.ndarray, window_s: float) -> float:
    """Max count over windows (t - w, t] ending at any arrival, O(n^2)."""
    a = np.sort(np.round(arrivals_s * NS_PER_S).astype(np.int64))
    w = int(round(window_s * NS_PER_S))
    return max(int(((a > t - w) & (a <= t)).sum()) for t in a) / window_s


def test_doubling_windows_start_at_service_time_and_stop_at_60s():
    ws = doubling_windows(0.05)
    assert ws[0] == 0.05 and ws[1] == 0.1
    assert ws[-1] == pytest.approx(51.2) and len(ws) == 11
    assert doubling_windows(0.5, 2.0) == (0.5, 1.0, 2.0)
    with pytest.raises(ValueError):
        doubling_windows(0.0)


def test_batch_envelope_matches_brute_force_on_unsorted_trace_with_ties():
    rng = np.random.default_rng(1)
    a = np.concatenate([rng.uniform(0, 20, 400), np.full(7, 3.25)])  # ties in one burst
    rng.shuffle(a)
    ws = [0.1, 0.5, 2.0, 10.0]
    got = envelope(a, ws)
    assert got.tolist() == pytest.approx([brute_force(a, w) for w in ws])
    assert got[0] >= 7 / 0.1  # the tied burst is inside one 0.1 s window


def test_tracker_fed_in_chunks_equals_batch_function():
    rng = np.random.default_rng(2)
    a = np.cumsum(rng.gamma(0.25, 1 / (0.25 * 200), 20_000))  # CV^2 = 4 at 200 qps
    ws = doubling_windows(0.02)
    tracker = EnvelopeTracker(ws)
    ns = np.round(a * NS_PER_S).astype(np.int64)
    cuts = np.sort(rng.choice(np.arange(1, ns.size), 300, replace=False))
    for chunk in np.split(ns, cuts):
        tracker.add(chunk)
    tracker.flush()
    assert tracker.arrivals == a.size and tracker.late == 0
    assert list(tracker.lifetime().rates_qps) == pytest.approx(envelope(a, ws).tolist())


def test_out_of_order_within_reorder_hold_back_is_exact():
    rng = np.random.default_rng(3)
    ns = np.sort(rng.integers(0, 10 * NS_PER_S, 5_000))
    jittered = ns.copy()
    for i in range(0, ns.size, 50):  # shuffle inside 50-arrival blocks (<< 1 s apart)
        rng.shuffle(jittered[i:i + 50])
    tracker = EnvelopeTracker([0.05, 1.0], reorder_s=1.0)
    for chunk in np.array_split(jittered, 200):
        tracker.add(chunk)
    tracker.flush()
    assert tracker.late == 0
    assert list(tracker.lifetime().rates_qps) == pytest.approx(envelope(ns / NS_PER_S, [0.05, 1.0]).tolist())


def test_late_arrival_is_counted_at_the_newest_time_and_reported():
    tracker = EnvelopeTracker([1.0])
    tracker.add([10 * NS_PER_S, 11 * NS_PER_S])
    tracker.add([int(2.5 * NS_PER_S)])  # older than what was counted
    assert tracker.late == 1 and tracker.arrivals == 3
    assert tracker.lifetime().rate(1.0) == 2.0  # counted with the arrival at 11 s


def test_recent_maxima_slide_and_decay_to_zero():
    tracker = EnvelopeTracker([1.0, 5.0], bucket_s=0.5, recent_horizon_s=30)
    burst = np.linspace(0, 0.99, 100) * NS_PER_S  # 100 in the first second
    steady = np.arange(1, 40, 0.1) * NS_PER_S  # then 10 qps until 40 s
    tracker.add(burst.astype(np.int64))
    assert tracker.recent(2 * NS_PER_S, 2).rate(1.0) == pytest.approx(100.0, rel=0.02)
    tracker.add(steady.astype(np.int64))
    later = tracker.recent(39 * NS_PER_S, 30)
    assert later.rate(1.0) == pytest.approx(10.0, abs=1.01) and later.rate(5.0) == pytest.approx(10.0, abs=0.3)
    assert tracker.lifetime().rate(1.0) >= 100.0  # the lifetime max keeps the burst
    assert tracker.recent(200 * NS_PER_S, 30).rates_qps == (0.0, 0.0)


def test_buffer_keeps_only_the_largest_window():
    tracker = EnvelopeTracker([0.01, 1.0])
    for sec in range(100):
        tracker.add(np.arange(sec * NS_PER_S, (sec + 1) * NS_PER_S, NS_PER_S // 1000))
    assert tracker.arrivals == 100_000
    assert tracker._hi - tracker._lo <= 2_000  # about one window of 1 s at 1000 qps, plus a chunk
    assert tracker._buf.size <= 8_192
