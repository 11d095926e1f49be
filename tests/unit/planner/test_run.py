"""The pure parts of the planner service loop: the arrival window and the measured p99."""
import numpy as np

from planner.run import ArrivalWindow, MeasuredLatency
from streams.config import KafkaSettings


def test_arrival_window_keeps_only_the_horizon_sorted():
    w = ArrivalWindow(horizon_s=10.0)
    w.add(np.array([5, 1, 30], dtype=np.int64) * 1_000_000_000)
    w.add(np.array([25], dtype=np.int64) * 1_000_000_000)
    assert list(w.snapshot(now_s=31.0)) == [25.0, 30.0]
    assert list(w.snapshot(now_s=45.0)) == []


def test_measured_p99_over_the_recent_horizon_only():
    m = MeasuredLatency(KafkaSettings(), "p", horizon_s=10.0)
    s = 1_000_000_000
    m._seen = [(1 * s, 500.0)] + [(20 * s + i, float(i)) for i in range(100)]
    assert m.p99_ms(now_ns=25 * s) == float(np.percentile(np.arange(100.0), 99))
    assert MeasuredLatency(KafkaSettings(), "p", 10.0).p99_ms(0) is None
