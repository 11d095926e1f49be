"""Accuracy scaling in the tuner's fast loop (Loki, issue 40): routing shares move down a loki stage's
ladder at once when the live envelope exceeds what the shares in force serve, by the least accuracy
that covers it, hardware first; and back once it subsides, without flapping. No sleeps: decisions
get ``now_ns`` explicitly."""
from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from slipstream.planner.service import handoff, handoff_record
from slipstream.schemas.records import StageConfig
from slipstream.streams import codec
from slipstream.streams.arrivals import poisson_arrivals
from tests.image_classify import CURVES, image_classify
from slipstream.tuner import planfile
from slipstream.tuner.envelope import EnvelopeSnapshot, envelope
from slipstream.tuner.ladder import Rung, accuracy, covering_shares, descent, mix_load
from slipstream.tuner.policy import (LiveTraffic, StageSizing, TunerConfig, TunerPlan, TunerState, decide, stage_shares)

from policy_flow import run_flow

BEST = Rung("best", 0.80, 1.0, 10.0, (12.0, 11.0, 10.5))
MID = Rung("mid", 0.78, 0.0, 20.0, (24.0, 22.0, 21.0))
CHEAP = Rung("cheap", 0.70, 0.0, 40.0, (48.0, 44.0, 42.0))
LADDER = (BEST, MID, CHEAP)
WINDOWS = (0.5, 1.0, 2.0)
INDEX = (1, 2, 2)  # each window sized by the first plan window >= twice it (TunerPlan.sized_index)
PLANNED = {"best": 1.0, "mid": 0.0, "cheap": 0.0}


def flat(rate: float) -> tuple[float, ...]:
    return (rate,) * len(WINDOWS)


def test_the_plans_shares_stay_while_they_cover_the_load():
    assert covering_shares(LADDER, PLANNED, flat(10.5), INDEX, 1, 0.05) == PLANNED
    assert covering_shares(LADDER, PLANNED, flat(20.0), INDEX, 2, 0.05) == PLANNED  # two replicas serve it


def test_the_least_share_moves_to_the_next_rung_computed_by_hand():
    # 15 req/s on one replica: best alone is loaded 15 / 10.5 at the 1 and 2 s windows; with f on mid
    # (1 - f) 15/10.5 + f 15/21 <= 1 needs f >= 0.6 (the 0.5 s window, sized by 11 and 22, needs 0.533)
    assert covering_shares(LADDER, PLANNED, flat(15.0), INDEX, 1, 0.05) == \
        {"best": pytest.approx(0.4), "mid": pytest.approx(0.6), "cheap": 0.0}
    # 25 req/s: all of best's share on mid is not enough (25/21); then (1 - f) 25/21 + f 25/42 <= 1:
    # f >= 0.32, rounded up to 0.35
    assert covering_shares(LADDER, PLANNED, flat(25.0), INDEX, 1, 0.05) == \
        {"best": 0.0, "mid": pytest.approx(0.65), "cheap": pytest.approx(0.35)}
    # beyond the cheapest rung alone (42): all on it, the least loaded there is
    assert covering_shares(LADDER, PLANNED, flat(60.0), INDEX, 1, 0.05) == {"best": 0.0, "mid": 0.0, "cheap": 1.0}


def test_the_accuracy_given_up_is_no_more_than_the_load_needs():
    """Against every mix of the three variants on a grid (one window, so the bound is one linear
    constraint): the shares cover the load and are as accurate as the most accurate mix that covers,
    less at most one share step of the accuracy between the rungs they mix."""
    one = tuple(replace(r, window_qps=r.window_qps[-1:]) for r in LADDER)
    grid = [(i / 100, j / 100, 1 - (i + j) / 100) for i, j in itertools.product(range(101), repeat=2) if i + j <= 100]
    for rate in np.linspace(8.0, 41.0, 34):
        shares = covering_shares(one, PLANNED, (rate,), (0,), 1, 0.05)
        assert mix_load(shares, one, (rate,), (0,), 1) <= 1 + 1e-9
        covering = [dict(zip(("best", "mid", "cheap"), g)) for g in grid]
        best = max(accuracy(m, one) for m in covering if mix_load(m, one, (rate,), (0,), 1) <= 1)
        exact = covering_shares(one, PLANNED, (rate,), (0,), 1, 1e-9)
        assert accuracy(exact, one) >= best - 1e-9
        assert accuracy(shares, one) >= accuracy(exact, one) - 0.05 * (0.80 - 0.70) - 1e-9
        if shares != PLANNED:  # a step less on the cheaper variant would not cover
            cheaper = max((v for v, f in shares.items() if f > 0), key=lambda v: -dict(best=0.8, mid=0.78,
                                                                                    cheap=0.7)[v])
            other = next((v for v, f in shares.items() if f > 0 and v != cheaper), None)
            if other is not None and shares[cheaper] >= 0.05 - 1e-9:
                back = {**shares, cheaper: shares[cheaper] - 0.05, other: shares[other] + 0.05}
                assert mix_load(back, one, (rate,), (0,), 1) > 1


def test_most_accurate_first_down_the_hull():
    assert [r.variant for r in descent(LADDER, "best")] == ["best", "mid", "cheap"]
    low = replace(MID, accuracy=0.72)  # under the chord from best to cheap: mixing them gives up less
    assert [r.variant for r in descent((BEST, low, CHEAP), "best")] == ["best", "cheap"]
    slow = replace(MID, rate_qps=9.0, window_qps=(11.0, 10.0, 9.0))  # slower than best: never helps
    assert [r.variant for r in descent((BEST, slow, CHEAP), "best")] == ["best", "cheap"]
    unbounded = replace(CHEAP, window_qps=())  # a lone item misses its budget on it
    assert [r.variant for r in descent((BEST, MID, unbounded), "best")] == ["best", "mid"]


def plan_of(ladder=LADDER, replicas: int = 1) -> TunerPlan:
    top = BEST
    stage = StageSizing("classify", replicas, top.rate_qps, 1.0, replicas * top.rate_qps,
                      tuple(replicas * x for x in top.window_qps), top.variant, (), ladder)
    return TunerPlan(EnvelopeSnapshot(WINDOWS, (8.0, 6.0, 5.0)), 5.0, (stage,))


def live(now_rate: float, recent_rate: float | None = None) -> LiveTraffic:
    recent = flat(max(now_rate, recent_rate or 0.0))
    return LiveTraffic(EnvelopeSnapshot(WINDOWS, flat(now_rate)), EnvelopeSnapshot(WINDOWS, recent), now_rate)


def test_hardware_first_then_accuracy_in_the_same_tick():
    plan, cfg = plan_of(), TunerConfig(activation_s=1.0, max_replicas=2)
    state = TunerState.initial(plan, 0)
    d, s = decide(live(18.0), plan, state, 10**9, cfg)  # two replicas of best serve 18: no share moves
    assert d.targets == {"classify": 2} and d.share_changes == () and s.shares["classify"] == PLANNED
    d, s = decide(live(30.0), plan, state, 10**9, cfg)  # beyond two replicas: both, in one tick
    assert d.targets == {"classify": 2} and d.short == {}  # the shares cover what the replicas cannot
    (c,) = d.share_changes
    assert c.reason == "accuracy-down" and c.previous == PLANNED and s.shares["classify"] == c.shares
    assert c.shares == covering_shares(LADDER, PLANNED, flat(30.0 * 1.1), INDEX, 2, cfg.share_step)  # headroom
    assert c.accuracy[0] == pytest.approx(0.80) and c.accuracy[1] < 0.80
    d, _ = decide(live(120.0), plan, state, 10**9, cfg)
    assert d.short == {"classify": 12}  # past the cheapest rung on two replicas: short, as before


def test_shares_come_back_after_the_quiet_period_as_the_burst_ages_out_and_do_not_flap():
    plan, cfg = plan_of(), TunerConfig(activation_s=1.0, max_replicas=1)  # quiet period 3 s
    s = TunerState.initial(plan, 0)
    d, s = decide(live(25.0), plan, s, 1 * 10**9, cfg)
    low = s.shares["classify"]
    assert d.share_changes and low["cheap"] > 0
    d, s = decide(live(8.0, recent_rate=25.0), plan, s, 2 * 10**9, cfg)  # subsided: hold in the quiet period
    assert d.share_changes == () and s.shares["classify"] == low
    assert decide(live(8.0), plan, s, 3 * 10**9, cfg)[0].share_changes == ()  # even with no burst left in view
    d, s = decide(live(8.0, recent_rate=25.0), plan, s, 5 * 10**9, cfg)  # quiet, but the burst is in the 30 s
    assert d.share_changes == ()
    d, s = decide(live(8.0, recent_rate=15.0), plan, s, 6 * 10**9, cfg)  # partly aged out: part of the way
    (c,) = d.share_changes
    assert c.reason == "accuracy-up" and accuracy(low, LADDER) < c.accuracy[1] < 0.80
    d, s = decide(live(14.0, recent_rate=15.0), plan, s, 6 * 10**9 + 10**8, cfg)  # next tick: no move down
    assert d.share_changes == ()
    d, s = decide(live(8.0, recent_rate=8.0), plan, s, 20 * 10**9, cfg)
    assert d.share_changes[0].shares == PLANNED and s.shares["classify"] == PLANNED


def test_shares_move_back_at_the_highest_pace_of_the_recent_horizon_so_a_dip_does_not_flap_them():
    """A steady 8 req/s on one replica: the best rung alone covers it at pace 1.1, not at 1.5. The
    workers' pace rises to 1.5, the shares move down; it dips to 1.1 for a while and rises again. At
    the dip, judged at the pace of the moment, the shares went back to the best rung, and the rise
    moved them down again (the runs s21 and s22: 7-15 moves at a steady rate); judged at the highest
    pace of the recent horizon, as the envelope is, they stay down: one move, none back."""
    plan, cfg = plan_of(), TunerConfig(activation_s=1.0, max_replicas=1)  # quiet period 3 s

    def at(pace: float, peak: float) -> LiveTraffic:
        return replace(live(8.0), pace={"classify": pace}, peak_pace={"classify": peak})

    s = TunerState.initial(plan, 0)
    moves = []
    for t, pace, peak in [(1, 1.5, 1.5), (5, 1.1, 1.5), (9, 1.5, 1.5), (13, 1.1, 1.5), (17, 1.5, 1.5)]:
        d, s = decide(at(pace, peak), plan, s, t * 10**9, cfg)
        moves += d.share_changes
    assert [c.reason for c in moves] == ["accuracy-down"]
    assert moves[0].shares["cheap"] + moves[0].shares["mid"] > 0
    # the same dip without the peak (a tuner that kept none): the pace of the moment decides
    d, _ = decide(at(1.1, 1.1), plan, s, 21 * 10**9, cfg)
    assert [c.reason for c in d.share_changes] == ["accuracy-up"] and d.share_changes[0].shares == PLANNED
    assert at(1.1, 1.5).slowest("classify") == 1.5 and live(8.0).slowest("classify") == 1.0


def test_a_stage_without_a_ladder_moves_no_share():
    plan = plan_of(ladder=())
    d, s = decide(live(30.0), plan, TunerState.initial(plan, 0), 10**9, TunerConfig(max_replicas=2))
    assert d.share_changes == () and s.shares == {} and d.short == {"classify": 3}


def test_stage_shares_is_none_while_the_shares_in_force_cover():
    plan = plan_of()
    assert stage_shares(plan, plan.stages[0], PLANNED, 1, live(10.0), True, TunerConfig()) is None


# ---- the hand-off of a real loki plan, as the planner publishes it

def tuner_plan(mode: str, rate: float = 25.0):
    from slipstream.planner.modes import make_planner

    problem = image_classify(rate, poisson_arrivals(rate, 30.0, 4))
    plan = make_planner(mode, validate=False).plan(problem)
    record = handoff_record(handoff(problem, plan, envelope), problem.name, epoch=1)
    return plan, planfile.from_dict(codec.decode("TunerHandoff", codec.encode("TunerHandoff", record)))


def test_a_loki_handoff_carries_the_ladder_and_other_modes_none():
    plan, tplan = tuner_plan("loki")
    classify = tplan.stages[1]
    assert plan.stage("classify").primary.variant == "lite2"
    assert [(r.variant, r.share) for r in classify.ladder] == [("lite2", 1.0), ("lite0", 0.0)]
    top, cheap = classify.ladder
    # one replica of the pool on each variant: the stage's capacity is the primary's times its replicas
    assert top.rate_qps * classify.replicas == pytest.approx(classify.capacity_qps)
    assert [x * classify.replicas for x in top.window_qps] == pytest.approx(classify.window_capacity_qps)
    assert cheap.service_ms == pytest.approx([CURVES["lite0"]["cpu-1"][str(b)] for b in (1, 2)])  # max batch 2
    assert cheap.rate_qps == pytest.approx(2 / 0.027) and len(cheap.window_qps) == len(tplan.envelope.windows_s)
    assert planfile.from_dict(planfile.to_dict(tplan, "x")) == tplan
    for mode in ("inferline", "milp"):
        assert all(not s.ladder for s in tuner_plan(mode)[1].stages)


def test_a_step_past_the_most_accurate_variant_is_met_by_shares_within_a_tick():
    """From half of what lite2 serves on the two replicas this host runs to 1.3 times it, within what
    lite0 serves: the tick after the live envelope crosses, classify runs both replicas and moves
    part of its items to lite0; never more than covers; back to lite2 once the step is over."""
    _, tplan = tuner_plan("loki")
    classify = tplan.stages[1]
    top = classify.ladder[0].rate_qps * 2
    cfg = TunerConfig(activation_s=1.0, max_replicas=2)
    low, high = poisson_arrivals(0.5 * top, 40.0, 1), 40 + poisson_arrivals(1.3 * top, 40.0, 2)
    back = 80 + poisson_arrivals(0.5 * top, 60.0, 3)
    history = run_flow(tplan, np.concatenate([low, high, back]), 140.0, cfg, every_s=0.1)
    moves = [(t, c) for t, _, d in history for c in d.share_changes]
    first = next(t for t, c in moves if c.reason == "accuracy-down")
    assert 40.0 < first <= 41.5  # within the first second of the step
    at = next(targets for t, targets, _ in history if t == first)
    assert at["classify"] == 2  # hardware first
    shares = {}
    for t, targets, d in history:
        for c in d.share_changes:
            shares = c.shares
        if 42 <= t <= 80:
            assert shares.get("lite0", 0) > 0
            assert 0.751 < accuracy(shares, classify.ladder) < 0.776  # part of the items only
    assert moves[-1][1].shares == {"lite2": 1.0, "lite0": 0.0} and moves[-1][0] < 140
    # down in a few steps as the step fills the envelope's longer windows, then back: no flapping
    assert all(c.reason == "accuracy-down" and c.accuracy[1] < c.accuracy[0] for t, c in moves if t < 78)
    assert all(c.reason == "accuracy-up" and c.accuracy[1] > c.accuracy[0] for t, c in moves if t >= 78)


# ---- the service: the new shares on the control topic within the tick

async def test_the_service_publishes_the_shares_in_a_stage_config_in_the_tick_that_moves_them():
    from slipstream.planner.modes import make_planner
    from slipstream.planner.service import stage_configs
    from slipstream.streams import topics
    from slipstream.streams.spec import load_pipeline
    from slipstream.tuner.actuators import DryRunActuator
    from slipstream.tuner.envelope import NS_PER_S
    from slipstream.tuner.service import ServiceSettings, TunerService

    pipe = load_pipeline("deploy/pipelines/image-classify.yaml")
    problem = image_classify(25.0, poisson_arrivals(25.0, 30.0, 4))
    plan = make_planner("loki", validate=False).plan(problem)
    record = handoff_record(handoff(problem, plan, envelope), pipe.name, epoch=1)
    tplan = planfile.from_dict(codec.decode("TunerHandoff", codec.encode("TunerHandoff", record)), pipeline=pipe)
    planned = {c.stage: replace(c, epoch=5) for c in stage_configs(pipe.name, plan, problem, 5)}
    assert planned["classify"].routing == {"lite2": 1.0, "lite0": 0.0}  # the ladder, loaded with the plan
    published = []

    async def publish(topic, kind, value, key):
        published.append((topic, kind, codec.decode(kind, codec.encode(kind, value)), key))

    now = [0]
    svc = TunerService(pipe, tplan, TunerConfig(activation_s=1.0, max_replicas=2), DryRunActuator(),
                       partitions={"resize": 4, "classify": 4}, publish=publish,
                       settings=ServiceSettings(reorder_s=0.0), clock=lambda: now[0])
    for c in planned.values():
        svc.on_stage_config(c)
    top = tplan.stages[1].ladder[0].rate_qps * 2  # lite2 on the two replicas this host runs
    arrivals = np.concatenate([poisson_arrivals(0.5 * top, 20.0, 1), 20 + poisson_arrivals(1.3 * top, 5.0, 2)])
    ns = np.round(arrivals * NS_PER_S).astype(np.int64)
    for k in range(1, 251):  # ticks of 0.1 s, as the live tuner's
        now[0] = k * NS_PER_S // 10
        svc.feed(ns[(ns > now[0] - NS_PER_S // 10) & (ns <= now[0])])
        decision = await svc.tick()
        if decision.share_changes:
            break
    assert 20.0 < now[0] / NS_PER_S <= 21.0, "the shares move within the first second of the step"
    (change,) = decision.share_changes
    classify = [p for p in published if p[1] == "StageConfig" and p[3] == "classify"][-1][2]
    assert classify["routing"] == change.shares and set(classify["routing"]) == {"lite2", "lite0"}
    assert classify["routing"]["lite0"] > 0 and classify["replicas"] == 2 and classify["epoch"] > 5
    assert classify["variant"] == "lite2" and classify["hardware"] == planned["classify"].hardware
    assert classify["reason"].startswith(("scale-up", "accuracy-down")) and "accuracy-down" in classify["reason"]
    assert all(p[0] in (topics.control(pipe.name), topics.scaling(pipe.name)) for p in published)
    while True:  # the next move, with the replicas as they are: a StageConfig alone, no ScalingAction
        before = len(published)
        now[0] += NS_PER_S // 10
        svc.feed(ns[(ns > now[0] - NS_PER_S // 10) & (ns <= now[0])])
        decision = await svc.tick()
        if decision.share_changes:
            break
    assert not decision.changes and now[0] <= 25 * NS_PER_S
    assert [(p[1], p[3]) for p in published[before:]] == [("StageConfig", "classify")]
    assert published[-1][2]["routing"] == decision.share_changes[0].shares
    assert published[-1][2]["epoch"] == classify["epoch"] + 1 and published[-1][2]["replicas"] == 2


def test_a_share_record_keeps_naming_every_variant_the_latest_config_named():
    """Dropping a name would make the workers unload it (slipstream.streams.shares.named) and load
    it again on the next move."""
    from slipstream.streams.spec import load_pipeline
    from slipstream.tuner.service import stage_config_record

    pipe = load_pipeline("deploy/pipelines/image-classify.yaml")
    latest = StageConfig(pipeline=pipe.name, stage="classify", variant="lite2", hardware="cpu-1", max_batch=2,
                         batch_timeout_ms=5.0, replicas=2, partitions=4, epoch=9, planner_mode="loki",
                         routing={"lite2": 1.0, "lite1": 0.0, "lite0": 0.0}, cost_per_hour=0.1, reason="plan")
    rec = stage_config_record(pipe, latest, "classify", 2, 4, "accuracy-down", {"lite2": 0.6, "lite0": 0.4})
    assert rec.routing == {"lite2": 0.6, "lite1": 0.0, "lite0": 0.4} and rec.epoch == 10
    assert stage_config_record(pipe, latest, "classify", 1, 4, "scale-down").routing == latest.routing
