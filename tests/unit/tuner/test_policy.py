"""The scaling policy, step by step and as scripted flows (Ray's upscale/downscale flow shape).

No sleeps: every decision gets ``now_ns`` explicitly and traffic is fed to a real tracker by timestamp.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from slipstream.tuner.envelope import NS_PER_S, EnvelopeSnapshot, doubling_windows
from slipstream.tuner.policy import (LiveTraffic, StageSizing, TunerConfig, TunerPlan, TunerState, decide, replicas_for_rate,
                          stage_up_target)

from policy_flow import run_flow

WINDOWS = doubling_windows(0.05)  # 0.05 .. 51.2 s
RATE = 100.0


def poisson(rate: float, seconds: float, seed: int, start: float = 0.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1 / rate, int(rate * seconds * 1.2) + 50)
    t = start + np.cumsum(gaps)
    return t[t < start + seconds]


def gamma(rate: float, cv2: float, seconds: float, seed: int, start: float = 0.0) -> np.ndarray:
    """Gamma inter-arrivals with mean 1/rate and squared coefficient of variation cv2 (InferLine)."""
    rng = np.random.default_rng(seed)
    shape = 1 / cv2
    gaps = rng.gamma(shape, 1 / (rate * shape), int(rate * seconds * 1.5) + 50)
    t = start + np.cumsum(gaps)
    return t[t < start + seconds]


STAGES = (StageSizing("detect", replicas=4, mu_qps=30.0, visit_ratio=1.0),
          StageSizing("classify", replicas=3, mu_qps=40.0, visit_ratio=0.5))


@pytest.fixture(scope="module")
def plan() -> TunerPlan:
    return TunerPlan.from_sample(poisson(RATE, 300, seed=10), WINDOWS, STAGES)


# ---- single steps


@pytest.mark.parametrize("lam,s,mu,r", [(100, 1.0, 30, 4), (37.3, 0.37, 3.1, 7), (1000, 2.5, 55.5, 50),
                                        (0.2, 1.0, 0.07, 3)])
def test_planned_rate_reproduces_planned_replicas(lam, s, mu, r):
    stage = StageSizing("m", r, mu, s)
    plan = TunerPlan(EnvelopeSnapshot((1.0,), (lam,)), lam, (stage,))
    assert replicas_for_rate(lam, stage, plan.rho(stage)) == r
    assert replicas_for_rate(lam * 1.01, stage, plan.rho(stage)) == math.ceil(r * 1.01 - 1e-9)


def test_replica_formula_counts_visit_ratio_and_rho():
    stage = StageSizing("m", 1, mu_qps=10.0, visit_ratio=0.5)
    assert replicas_for_rate(100.0, stage, rho=0.5) == 10  # 100 * 0.5 / (10 * 0.5)
    assert replicas_for_rate(100.0, replace(stage, visit_ratio=0.0), rho=0.5) == 0


def scaled(plan: TunerPlan, factor: float) -> EnvelopeSnapshot:
    return replace(plan.envelope, rates_qps=tuple(factor * r for r in plan.envelope.rates_qps))


def live(plan: TunerPlan, factor: float, recent: float | None = None, down_rate: float | None = None):
    return LiveTraffic(scaled(plan, factor), scaled(plan, factor if recent is None else recent),
                       RATE * factor if down_rate is None else down_rate)


def test_a_window_triggers_only_beyond_its_planned_count_plus_slack(plan):
    detect = STAGES[0]
    assert stage_up_target(plan, detect, 4, scaled(plan, 0.9), 1.0, "per-window") == (4, None)
    rates = list(plan.envelope.rates_qps)
    w = WINDOWS[2]
    planned_count = rates[2] * w
    rates[2] = (planned_count + 0.9 * math.sqrt(planned_count)) / w  # inside the slack
    bumped = replace(plan.envelope, rates_qps=tuple(rates))
    assert stage_up_target(plan, detect, 4, bumped, 1.0, "per-window")[0] == 4
    assert stage_up_target(plan, detect, 4, bumped, 0.0, "per-window")[0] == 5  # InferLine: no slack
    rates[2] = plan.envelope.rates_qps[2] * 1.5
    target, trigger = stage_up_target(plan, detect, 4, replace(plan.envelope, rates_qps=tuple(rates)),
                                      1.0, "per-window")
    assert target == 6 and trigger.window_s == w


def test_running_replicas_scale_the_comparison(plan):
    """At half the planned replicas, 80% of the planned traffic triggers (it would not at R)."""
    detect = STAGES[0]
    assert stage_up_target(plan, detect, 4, scaled(plan, 0.8), 0.0, "per-window")[0] == 4
    target, trigger = stage_up_target(plan, detect, 2, scaled(plan, 0.8), 0.0, "per-window")
    assert target == math.ceil(4 * 0.8) and trigger.planned_rate_qps == pytest.approx(
        plan.envelope.rate(trigger.window_s) / 2)


# ---- scripted flows


def test_rate_step_scales_up_within_a_second_and_holds(plan):
    cfg = TunerConfig(activation_s=5.0)
    arrivals = np.concatenate([poisson(RATE, 30, seed=1), poisson(2 * RATE, 30, seed=2, start=30)])
    hist = run_flow(plan, arrivals, 60, cfg)
    before = [t for t in hist if t[0] <= 30]
    assert all(h[1] == plan.planned_replicas for h in before)  # planned traffic: no change
    first_up = next(h for h in hist if h[1] != plan.planned_replicas)
    assert 30 < first_up[0] <= 31.0  # up fast
    final = hist[-1][1]
    # double the rate -> about double the planned replicas (visit ratio applied per stage)
    assert 7 <= final["detect"] <= 9 and 5 <= final["classify"] <= 7
    ups = [c for h in hist for c in h[2].changes]
    assert all(c.reason == "scale-up" and c.replicas > c.previous for c in ups)


def test_burstier_arrivals_at_same_mean_trigger_on_a_short_window(plan):
    """InferLine Fig. 12: CV^2 = 4 gamma arrivals at the planned mean exceed the Poisson envelope at
    short windows; Poisson at the same mean (another seed) does not."""
    cfg = TunerConfig(activation_s=5.0)
    calm = run_flow(plan, poisson(RATE, 60, seed=3), 60, cfg)
    assert all(h[1] == plan.planned_replicas for h in calm)
    bursty = run_flow(plan, gamma(RATE, 4.0, 60, seed=4), 60, cfg)
    ups = [h for h in bursty if h[2].changes]
    assert ups, "bursty traffic at the planned mean must scale up"
    first = ups[0][2]
    assert first.trigger.window_s < 5.0  # a short window saw it
    assert first.trigger.live_rate_qps > first.trigger.planned_rate_qps
    long_windows = [w for w in WINDOWS if w >= 25]
    assert all(first.trigger.window_s != w for w in long_windows)


def test_mean_rho_mode_scales_by_peak_to_mean_and_per_window_by_excess(plan):
    """Same trigger, two rho readings: per-window asks R * r/r_plan(w), mean asks R * r/lambda."""
    w = WINDOWS[1]
    rates = list(plan.envelope.rates_qps)
    rates[1] = plan.envelope.rate(w) * 1.5  # beyond the 1-sigma slack (25 planned in 0.1 s)
    env = replace(plan.envelope, rates_qps=tuple(rates))
    traffic = LiveTraffic(env, env, down_rate_qps=RATE)
    state = TunerState.initial(plan, 0)
    per_window, _ = decide(traffic, plan, state, 1, TunerConfig(max_replicas=1000))
    mean, _ = decide(traffic, plan, state, 1, TunerConfig(rho_mode="mean", max_replicas=1000))
    assert per_window.targets["detect"] == 6
    assert mean.targets["detect"] == math.ceil(4 * rates[1] / plan.mean_rate_qps - 1e-9)
    assert mean.targets["detect"] > per_window.targets["detect"]


def test_drop_scales_down_only_after_quiet_period_and_recent_peak_expires(plan):
    cfg = TunerConfig(activation_s=5.0)  # quiet period 15 s
    arrivals = np.concatenate([poisson(2 * RATE, 40, seed=5), poisson(RATE / 4, 80, seed=6, start=40)])
    hist = run_flow(plan, arrivals, 120, cfg)
    ups = [h for h in hist if any(c.reason == "scale-up" for c in h[2].changes)]
    downs = [h for h in hist if any(c.reason == "scale-down" for c in h[2].changes)]
    assert ups and downs and ups[-1][0] < 41 and all(h[0] >= 40 for h in downs)
    first_down = downs[0][0]
    # the 5 s peak of the last 30 s still holds the 200 qps traffic until ~70 s
    assert first_down > 40 + cfg.down_horizon_s - 1
    held = [h for h in hist if 41 <= h[0] < first_down]
    assert all(h[1] == ups[-1][1] for h in held)
    assert all("hold" in h[2].note or h[2].note == "steady" for h in held)
    # 25 qps asks for less than the plan; the tuner stops at the plan (lower is the planner's call)
    assert hist[-1][1] == plan.planned_replicas


def test_scale_down_waits_for_quiet_period_and_a_scale_up_restarts_it(plan):
    cfg = TunerConfig(activation_s=2.0)  # quiet 6 s
    low, high = live(plan, 0.2), live(plan, 1.5)
    state = TunerState.initial(plan, 0)
    script = [(1, low, "hold"), (5.9, low, "hold"), (6.5, high, "up"), (8, low, "hold"),
              (12.4, low, "hold"), (12.6, low, "down"), (13, low, "hold"), (18.5, low, "hold")]
    for t, traffic, expect in script:
        before = dict(state.replicas)
        decision, state = decide(traffic, plan, state, int(t * NS_PER_S), cfg)
        after = dict(decision.targets)
        assert after == dict(state.replicas)
        if expect == "hold":
            assert after == before, t
        elif expect == "up":
            assert all(after[k] >= before[k] for k in after) and after != before, t
        else:
            assert all(after[k] <= before[k] for k in after) and after != before, t
    # 20 qps asks for ceil(20 s_m / (mu_m rho_m)) = 1 of each; the plan's count is the floor
    assert state.replicas == plan.planned_replicas


def test_scale_down_never_goes_below_what_the_recent_envelope_asks_for(plan):
    """A low 5 s peak, but the last 30 s saw a short burst: keep what the burst would scale up to."""
    rates = list(scaled(plan, 0.2).rates_qps)
    rates[1] = plan.envelope.rates_qps[1] * 1.5  # a 0.1 s burst at 150% of plan within the last 30 s
    traffic = LiveTraffic(scaled(plan, 0.2), replace(plan.envelope, rates_qps=tuple(rates)), 20.0)
    state = TunerState({"detect": 8, "classify": 6}, last_change_ns=0)
    decision, _ = decide(traffic, plan, state, 100 * NS_PER_S, TunerConfig())
    assert decision.targets["detect"] == math.ceil(4 * 1.5) == 6  # not the planned 4 that 20 qps asks for
    assert decision.targets["classify"] == math.ceil(3 * 1.5) == 5


def test_scale_down_never_goes_below_the_planned_count(plan):
    """Traffic far below the plan: the tuner comes back to the plan; lower is the planner's call."""
    state = TunerState({"detect": 8, "classify": 6}, last_change_ns=0)
    decision, _ = decide(live(plan, 0.1), plan, state, 100 * NS_PER_S, TunerConfig())
    assert decision.targets == plan.planned_replicas


def test_after_scale_down_returning_traffic_scales_back_up(plan):
    state = TunerState({"detect": 2, "classify": 2}, last_change_ns=0)
    decision, new_state = decide(live(plan, 0.8), plan, state, NS_PER_S, TunerConfig())
    assert decision.targets["detect"] == math.ceil(4 * 0.8 - 1e-9) and decision.targets["detect"] > 2
    assert new_state.last_change_ns == NS_PER_S


def test_bounds_cap_the_target_and_say_what_the_envelope_asked(plan):
    decision, state = decide(live(plan, 10), plan, TunerState.initial(plan, 0), 1, TunerConfig(max_replicas=6))
    assert decision.targets == {"detect": 6, "classify": 6}
    assert decision.short == {"detect": 40, "classify": 30}  # 10x the planned 4 and 3, not the capped 6
    held, _ = decide(live(plan, 10), plan, state, 2, TunerConfig(max_replicas=6))  # at the cap: no change
    assert held.changes == () and held.short == decision.short
    roomy, _ = decide(live(plan, 10), plan, TunerState.initial(plan, 0), 1, TunerConfig(max_replicas=64))
    assert roomy.short == {}


def test_config_rejects_nonsense():
    with pytest.raises(ValueError, match="rho_mode"):
        TunerConfig(rho_mode="median")
    with pytest.raises(ValueError):
        TunerConfig(min_replicas=5, max_replicas=2)
    with pytest.raises(ValueError):
        StageSizing("x", 0, 1.0, 1.0)


def test_traffic_back_at_the_planned_rate_returns_every_stage_to_its_planned_count(plan):
    """The planner plans for a rate (the hand-off's planned rate, a peak of the sample): after a burst,
    traffic back at that rate brings every stage back to its planned count, not just the tightest."""
    sample = poisson(RATE, 300, seed=10)
    planned = replace(plan, mean_rate_qps=float(envelope_rate(sample, 5.0)))
    cfg = TunerConfig(activation_s=2.0)
    arrivals = np.concatenate([poisson(RATE, 30, seed=1), poisson(3 * RATE, 15, seed=2, start=30),
                               poisson(RATE, 115, seed=3, start=45)])
    # the longest window (51.2 s) ending in the last 30 s remembers the burst until ~126 s
    hist = run_flow(planned, arrivals, 160, cfg)
    peak = max(max(h[1][s] - r for s, r in planned.planned_replicas.items()) for h in hist)
    assert peak > 0, "the burst did not scale up"
    assert hist[-1][1] == planned.planned_replicas


def envelope_rate(arrivals_s: np.ndarray, window_s: float) -> float:
    from slipstream.tuner.envelope import envelope

    return float(envelope(np.sort(arrivals_s), (window_s,))[0])
