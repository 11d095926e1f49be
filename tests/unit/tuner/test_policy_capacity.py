"""The tuner sized to the plan: it scales up only when the live envelope exceeds what the planned
replicas serve within the SLO (the hand-off's capacity), by the replicas the excess needs, and comes
back down to the plan, never below it. No sleeps: decisions get ``now_ns`` explicitly."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from slipstream.planner.problem import parse_problem
from slipstream.streams.arrivals import poisson_arrivals
from slipstream.planner.service import handoff, handoff_record
from slipstream.streams import codec
from slipstream.tuner import planfile
from slipstream.tuner.envelope import NS_PER_S, EnvelopeSnapshot, doubling_windows, envelope
from slipstream.tuner.policy import LiveTraffic, StageSizing, TunerConfig, TunerPlan, TunerState, decide, stage_up_target

from policy_flow import run_flow

CURVES = {"resize": {"cpu-1": {"1": 4, "2": 7, "4": 13, "8": 25}},
          "lite0": {"cpu-1": {"1": 15, "2": 27, "4": 52, "8": 100}}}


def image_classify(rate_qps: float, sample_s: np.ndarray):
    doc = {"slo_ms": 400, "arrival": {"rate_qps": rate_qps}, "hardware": {"cpu-1": {"cost_per_hour": 0.05}},
           "hop_ms": 6.0, "activation_s": 1.0,
           "stages": [{"name": "resize", "variants": [{"name": "resize", "latency_ms": CURVES["resize"]}]},
                      {"name": "classify", "variants": [{"name": "lite0", "accuracy": 0.751,
                                                         "latency_ms": CURVES["lite0"]}]}],
           "edges": [{"from": "resize", "to": "classify"}]}
    return replace(parse_problem(doc), arrivals_s=sample_s)


@pytest.fixture(scope="module")
def quiet_plan():
    """The issue's case: a plan for 27 qps made on a quiet sample (4.9 qps), as the planner hands it
    over on the control topic (record -> Avro -> the tuner's reader)."""
    from slipstream.planner.modes import make_planner

    problem = image_classify(27.0, poisson_arrivals(4.9, 30.0, 4))
    plan = make_planner("milp", validate=False).plan(problem)
    assert plan.feasible and plan.rate_qps == pytest.approx(27.0)
    record = handoff_record(handoff(problem, plan, envelope), problem.name, epoch=1)
    record = codec.decode("TunerHandoff", codec.encode("TunerHandoff", record))
    return plan, planfile.from_dict(record)


def test_the_handoff_carries_what_the_planned_replicas_serve(quiet_plan):
    plan, tplan = quiet_plan
    for s in tplan.stages:
        assert s.capacity_qps == pytest.approx(s.replicas * s.mu_qps / s.visit_ratio)
        assert s.capacity_qps >= plan.rate_qps  # the plan was sized for 27 qps
        assert len(s.window_capacity_qps) == len(tplan.envelope.windows_s)
        # the longest window's burst allowance is small: its rate tends to the sustained one
        assert s.window_capacity_qps[-1] == pytest.approx(s.capacity_qps, rel=0.05)
        assert list(s.window_capacity_qps) == sorted(s.window_capacity_qps, reverse=True)
    assert tplan.stages[1].window_capacity_qps[0] > 2 * tplan.envelope.rates_qps[0]
    # and the batch service times those numbers assume, for the workers' pace (slipstream.tuner.pace)
    for s, sp in zip(tplan.stages, plan.stages):
        curve = CURVES[sp.primary.variant]["cpu-1"]
        assert s.variant == sp.primary.variant and len(s.service_ms) == sp.primary.max_batch
        assert s.service_ms[0] == pytest.approx(curve["1"])


def test_no_scale_up_below_the_plans_capacity(quiet_plan):
    """Live 5.5 qps (and bursts up to 25 qps) on a plan for 27 qps: no scale-up. The same hand-off
    without its capacity (a record written before it) scales up on the 5.5 qps alone."""
    _, tplan = quiet_plan
    cfg = TunerConfig(activation_s=1.0)
    steady = poisson_arrivals(5.5, 120.0, 7)
    assert all(h[1] == tplan.planned_replicas for h in run_flow(tplan, steady, 120, cfg))
    bursty = np.sort(np.concatenate([steady, 40 + poisson_arrivals(20.0, 10.0, 8)]))
    assert all(h[1] == tplan.planned_replicas for h in run_flow(tplan, bursty, 120, cfg))
    old = replace(tplan, stages=tuple(replace(s, capacity_qps=0.0, window_capacity_qps=()) for s in tplan.stages))
    assert any(h[1] != old.planned_replicas for h in run_flow(old, steady, 120, cfg))


WINDOWS = doubling_windows(0.1, 12.8)  # 0.1 .. 12.8 s


def flat_plan(replicas: int, capacity_qps: float) -> TunerPlan:
    """A stage whose planned replicas serve ``capacity_qps`` at every window; the sample was quiet."""
    stage = StageSizing("m", replicas, mu_qps=capacity_qps / replicas, visit_ratio=1.0, capacity_qps=capacity_qps,
                      window_capacity_qps=tuple(capacity_qps for _ in WINDOWS))
    return TunerPlan(EnvelopeSnapshot(WINDOWS, tuple(5.0 for _ in WINDOWS)), 5.0, (stage,))


def at(rate: float) -> EnvelopeSnapshot:
    return EnvelopeSnapshot(WINDOWS, tuple(rate for _ in WINDOWS))


def test_a_burst_beyond_capacity_scales_by_what_the_excess_needs():
    plan = flat_plan(2, 30.0)  # 2 replicas serve 30 req/s
    stage = plan.stages[0]
    assert stage_up_target(plan, stage, 2, at(30.0), 1.0, "per-window") == (2, None)  # at capacity: hold
    target, trigger = stage_up_target(plan, stage, 2, at(31.0), 1.0, "per-window")
    assert target == 3 and trigger.planned_rate_qps == pytest.approx(30.0)  # no slack over a computed bound
    assert stage_up_target(plan, stage, 2, at(75.0), 1.0, "per-window")[0] == math.ceil(2 * 75 / 30)  # 5
    assert stage_up_target(plan, stage, 5, at(75.0), 1.0, "per-window") == (5, None)  # 5 serve 75
    # one window over: only it asks, for what it needs
    rates = [30.0] * len(WINDOWS)
    rates[3] = 100.0
    target, trigger = stage_up_target(plan, stage, 2, EnvelopeSnapshot(WINDOWS, tuple(rates)), 1.0, "per-window")
    assert target == math.ceil(2 * 100 / 30) and trigger.window_s == WINDOWS[3]


def test_scale_down_returns_to_the_plan_and_never_below_it():
    plan = flat_plan(2, 30.0)
    cfg = TunerConfig(activation_s=1.0)
    up, state = decide(LiveTraffic(at(75.0), at(75.0), 75.0), plan, TunerState.initial(plan, 0), 0, cfg)
    assert up.targets == {"m": 5}
    quiet = LiveTraffic(at(1.0), at(1.0), 1.0)
    hold, state = decide(quiet, plan, state, NS_PER_S, cfg)
    assert hold.targets == {"m": 5} and hold.note.startswith("hold")  # before the quiet period
    down, state = decide(quiet, plan, state, 10 * NS_PER_S, cfg)
    assert down.targets == {"m": 2} and down.changes[0].reason == "scale-down"  # the plan, not 1
    later, _ = decide(quiet, plan, state, 100 * NS_PER_S, cfg)
    assert later.targets == {"m": 2} and later.note == "steady"
    # traffic at 45 req/s after the burst: down to what 45 needs (3), not to the plan
    mid, _ = decide(LiveTraffic(at(45.0), at(45.0), 45.0), plan,
                    TunerState({"m": 5}, 0), 10 * NS_PER_S, cfg)
    assert mid.targets == {"m": 3}


def test_a_capacity_must_cover_every_window():
    stage = StageSizing("m", 1, 10.0, 1.0, 10.0, (20.0, 10.0))
    with pytest.raises(ValueError, match="one per plan window"):
        TunerPlan(EnvelopeSnapshot(WINDOWS, tuple(1.0 for _ in WINDOWS)), 1.0, (stage,))
    with pytest.raises(ValueError, match="capacity_qps > 0"):
        StageSizing("m", 1, 10.0, 1.0, 0.0, (20.0, 10.0))


def test_a_burst_is_taken_to_last_as_long_again():
    """A window's live rate is held to the capacity at twice the window (the burst goes on while new
    replicas load), the last window to its own."""
    caps = tuple(30.0 + 60.0 / (1 + i) for i in range(len(WINDOWS)))  # falling toward the sustained rate
    stage = StageSizing("m", 1, 30.0, 1.0, 30.0, caps)
    plan = TunerPlan(EnvelopeSnapshot(WINDOWS, tuple(5.0 for _ in WINDOWS)), 5.0, (stage,))
    assert plan.sized_envelope(stage) == caps[1:] + caps[-1:]
    rates = [0.0] * len(WINDOWS)
    rates[2] = (caps[2] + caps[3]) / 2  # within the window's own capacity, beyond twice the window's
    target, trigger = stage_up_target(plan, stage, 1, EnvelopeSnapshot(WINDOWS, tuple(rates)), 1.0, "per-window")
    assert target == 2 and trigger.window_s == WINDOWS[2] and trigger.planned_rate_qps == pytest.approx(caps[3])
