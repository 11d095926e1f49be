"""The pure parts of the planner service loop: the arrival window and the measured p99."""
import math

import numpy as np

from slipstream.planner.run import ArrivalWindow, MeasuredLatency
from slipstream.streams.config import KafkaSettings
from tests.control_records import result as record


def test_arrival_window_keeps_only_the_horizon_sorted():
    w = ArrivalWindow(horizon_s=10.0)
    w.add(np.array([5, 1, 30], dtype=np.int64) * 1_000_000_000)
    w.add(np.array([25], dtype=np.int64) * 1_000_000_000)
    assert list(w.snapshot(now_s=31.0)) == [25.0, 30.0]
    assert list(w.snapshot(now_s=45.0)) == []


def result(finished_s: float, latency_ms: float, status: str = "done"):
    s = 1_000_000_000
    return record(status=status, finished_ns=int(finished_s * s), created_ns=int(finished_s * s - latency_ms * 1e6))


def test_measured_p99_over_the_recent_horizon_only():
    m = MeasuredLatency(KafkaSettings(), "p", horizon_s=10.0)
    m.add(result(1, 500.0))  # older than the horizon at 25 s
    for i in range(100):
        m.add(result(20, float(i + 1)))
    assert m.p99_ms(now_ns=25 * 1_000_000_000) == 99.0  # nearest rank: the 99th of 1..100
    assert MeasuredLatency(KafkaSettings(), "p", 10.0).p99_ms(0) is None


def test_measured_p99_counts_results_not_done_as_infinitely_late():
    """The report's and the estimator's p99 (slipstream.planner.results.nearest_rank over every request that
    ended, not done = late): one drop in 100 leaves the p99 at the 99th latency, two make it infinite."""
    m = MeasuredLatency(KafkaSettings(), "p", horizon_s=10.0)
    for i in range(99):
        m.add(result(20, float(i + 1)))
    m.add(result(20, 0.0, "dropped"))  # a drop is quick, and still late
    assert m.p99_ms(25 * 1_000_000_000) == 99.0  # done-only would be np.percentile(1..99, 99) = 98.02
    m.add(result(20, 1.0, "error"))
    assert m.p99_ms(25 * 1_000_000_000) == math.inf


def test_a_plan_reads_back_from_what_it_wrote():
    from slipstream.planner.plan import Assignment, Plan, Round, StagePlan

    plan = Plan("milp", (StagePlan("a", (Assignment("v", "cpu", 4, 2, 0.6, 5.0), Assignment("w", "gpu", 8, 1, 0.4)), 8),),
                True, cost_per_hour=1.5, predicted_p99_ms=90.0, rounds=(Round(100.0, 20.0, 1.5, 90.0, 0.99, True),),
                notes=("binding: slo",), rate_qps=20.0)
    assert Plan.from_dict(plan.to_dict()) == plan
