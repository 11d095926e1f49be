"""The workers' pace: their batches against the service times the plan's capacity assumed, and the
capacity the tuner scales on divided by it. No sleeps: times are given explicitly."""
from __future__ import annotations

from dataclasses import replace

import pytest

from slipstream.tuner.envelope import NS_PER_S, EnvelopeSnapshot, doubling_windows
from slipstream.tuner.pace import PaceConfig, PaceTracker, hop_ratios
from slipstream.tuner.policy import LiveTraffic, StageSizing, TunerConfig, TunerPlan, TunerState, decide, stage_up_target
from slipstream.tuner.service import describe

EXPECTED = {"classify": {"lite0": (20.0, 30.0, 40.0, 50.0)}}


def result(*hops) -> dict:
    return {"request_id": "r", "hops": [{"stage": s, "variant": v, "batch_size": b, "started_ns": t0,
                                          "finished_ns": t0 + int(ms * 1e6)} for s, v, b, t0, ms in hops]}


def test_a_hop_is_measured_against_the_service_time_of_its_batch_size():
    r = result(("resize", "resize-260", 1, 0, 9.0),  # no expectation for the stage
               ("classify", "lite0", 2, 10, 45.0),
               ("classify", "lite2", 1, 20, 40.0),  # another variant than the plan's
               ("classify", "lite0", 8, 30, 99.0))  # a batch larger than the plan's max
    assert hop_ratios(r, EXPECTED) == [("classify", 10 + 45_000_000, pytest.approx(1.5), 0.5)]


def test_pace_is_the_mean_ratio_of_the_recent_batches_each_counted_once():
    t = PaceTracker(PaceConfig(window_s=10.0, min_batches=3))
    for i in range(4):  # four batches of 2, each carried by both of its results
        for _ in range(2):
            t.add(result(("classify", "lite0", 2, i * NS_PER_S, 60.0)), EXPECTED)  # 2x the 30 ms assumed
    assert t.pace(5 * NS_PER_S) == {"classify": pytest.approx(2.0)}
    assert t.pace(12 * NS_PER_S) == {}  # two batches finished in (2 s, 12 s]: fewer than 3
    assert t.pace(20 * NS_PER_S) == {}  # all aged out: nothing said, pace 1


def test_pace_is_held_between_floor_and_ceiling_and_needs_enough_batches():
    t = PaceTracker(PaceConfig(min_batches=5, ceiling=3.0))
    for i in range(4):
        t.add(result(("classify", "lite0", 1, i, 10.0)), EXPECTED)  # twice as fast as assumed
    assert t.pace(10) == {}  # four batches: too few
    t.add(result(("classify", "lite0", 1, 5, 10.0)), EXPECTED)
    assert t.pace(10) == {"classify": 1.0}  # never faster than the plan: its capacity is not raised
    for i in range(20):
        t.add(result(("classify", "lite0", 1, 10 + i, 500.0)), EXPECTED)
    assert t.pace(100) == {"classify": 3.0}  # a wrong measurement adds replicas only so far


def test_the_peak_is_the_highest_pace_read_over_the_horizon():
    t = PaceTracker(PaceConfig(window_s=2.0, min_batches=1))
    seen = []
    for sec, ms in enumerate([30.0, 60.0, 30.0, 30.0, 30.0, 30.0]):  # one batch of 1 a second: 1.5, then 3.0
        t.add(result(("classify", "lite0", 1, sec * NS_PER_S, ms)), {"classify": {"lite0": (20.0,)}})
        seen.append(t.read(sec * NS_PER_S + NS_PER_S // 2, 3.0))
    assert [now["classify"] for now, _ in seen] == pytest.approx([1.5, 2.25, 2.25, 1.5, 1.5, 1.5])
    assert [peak["classify"] for _, peak in seen] == pytest.approx([1.5, 2.25, 2.25, 2.25, 2.25, 1.5])
    assert t.peak(100 * NS_PER_S, 3.0) == {}  # nothing read in the horizon: pace 1


WINDOWS = doubling_windows(0.1, 12.8)


def plan_of(capacity_qps: float) -> TunerPlan:
    stage = StageSizing("classify", 1, mu_qps=capacity_qps, visit_ratio=1.0, capacity_qps=capacity_qps,
                      window_capacity_qps=tuple(capacity_qps for _ in WINDOWS),
                      variant="lite0", service_ms=(20.0,))
    return TunerPlan(EnvelopeSnapshot(WINDOWS, tuple(5.0 for _ in WINDOWS)), 5.0, (stage,))


def at(rate: float) -> EnvelopeSnapshot:
    return EnvelopeSnapshot(WINDOWS, tuple(rate for _ in WINDOWS))


def test_capacity_is_divided_by_the_pace():
    plan = plan_of(40.0)
    slow = plan.at_pace({"classify": 1.25})
    assert slow.stages[0].capacity_qps == pytest.approx(32.0)
    assert slow.stages[0].window_capacity_qps == pytest.approx([x / 1.25 for x in plan.stages[0].window_capacity_qps])
    assert plan.at_pace({}) is plan and plan.at_pace({"other": 2.0}).stages == plan.stages
    # a stage sized to the sample (no capacity) has nothing to divide
    sample = replace(plan, stages=(replace(plan.stages[0], capacity_qps=0.0, window_capacity_qps=()),))
    assert sample.at_pace({"classify": 2.0}) == sample


def test_a_rate_the_plan_serves_scales_up_on_a_machine_running_slower():
    """36 req/s at every window: within the 40 req/s one replica serves as planned; not at pace 1.25,
    where it serves 32: then 2 replicas, and the action says why."""
    plan, cfg = plan_of(40.0), TunerConfig(activation_s=1.0)
    state = TunerState.initial(plan, 0)
    same, _ = decide(LiveTraffic(at(36.0), at(36.0), 36.0), plan, state, NS_PER_S, cfg)
    assert same.targets == {"classify": 1} and not same.changes
    up, _ = decide(LiveTraffic(at(36.0), at(36.0), 36.0, {"classify": 1.25}), plan, state, NS_PER_S, cfg)
    assert up.targets == {"classify": 2}
    assert up.changes[0].pace == 1.25 and describe(up.changes[0]).endswith("(capacity at pace 1.25)")
    # at the paced capacity itself, nothing: the trigger is the paced bound, not below it
    assert stage_up_target(plan.at_pace({"classify": 1.25}), plan.stages[0], 1, at(32.0), 1.0,
                           "per-window") == (1, None)


def test_scale_down_keeps_what_the_slower_replicas_need():
    plan, cfg = plan_of(40.0), TunerConfig(activation_s=1.0)
    busy = TunerState({"classify": 3}, 0)
    fast, _ = decide(LiveTraffic(at(36.0), at(36.0), 36.0), plan, busy, 100 * NS_PER_S, cfg)
    slow, _ = decide(LiveTraffic(at(36.0), at(36.0), 36.0, {"classify": 1.25}), plan, busy, 100 * NS_PER_S, cfg)
    assert fast.targets == {"classify": 1} and slow.targets == {"classify": 2}
