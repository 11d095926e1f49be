"""A loki plan's ladders (slipstream.planner.capacity.ladders): the variants each stage's pool keeps loaded, named in
its StageConfig with share 0 and handed to the tuner with what one replica serves on each; and a
re-plan in a burst the ladder serves waits, whether it would load models or only reset the tuner's shares
(slipstream.planner.service.defers)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from slipstream.planner.capacity import ladders, stage_capacity
from slipstream.planner.plan import Assignment, evaluate
from slipstream.planner.problem import parse_problem
from slipstream.planner.service import defers, ladder_keeps_up, named_variants, stage_configs

LITE0 = {"cpu-1": {"1": 15, "2": 27, "4": 52}, "cpu-2": {"1": 10, "2": 18, "4": 34}}
LITE1 = {"cpu-1": {"1": 25, "2": 46, "4": 88}}
LITE2 = {"cpu-1": {"1": 38, "2": 70, "4": 130}, "cpu-2": {"1": 24, "2": 44, "4": 82}}


def problem(rate_qps: float = 25.0, **kw):
    doc = {"slo_ms": 400, "arrival": {"rate_qps": rate_qps}, "hop_ms": 6.0, "max_stage_replicas": 2,
           "hardware": {"cpu-1": {"cost_per_hour": 0.05}, "cpu-2": {"cost_per_hour": 0.10}},
           "stages": [{"name": "resize", "variants": [{"name": "resize-260", "latency_ms": {
               "cpu-1": {"1": 4, "2": 7, "4": 13}, "cpu-2": {"1": 3, "2": 5, "4": 9}}}]},
               {"name": "classify", "variants": [{"name": "lite0", "accuracy": 0.751, "latency_ms": LITE0},
                                                 {"name": "lite1", "accuracy": 0.767, "latency_ms": LITE1},
                                                 {"name": "lite2", "accuracy": 0.776, "latency_ms": LITE2}]}],
           "edges": [{"from": "resize", "to": "classify"}], **kw}
    return parse_problem(doc)


def plan(p, mode="loki", hw="cpu-1", variants=(("lite2", 1.0),), replicas=1):
    classify = tuple(Assignment(v, hw, 2, replicas, w, 5.0) for v, w in variants)
    return evaluate(p, mode, {"resize": (Assignment("resize-260", hw, 2, 1, 1.0, 2.0),), "classify": classify})


def test_a_loki_stage_names_every_variant_profiled_on_its_hardware_most_accurate_first():
    p = problem()
    assert ladders(p, plan(p)) == {"classify": {"lite2": 1.0, "lite1": 0.0, "lite0": 0.0}}  # resize: one variant
    assert ladders(p, plan(p, hw="cpu-2")) == {"classify": {"lite2": 1.0, "lite0": 0.0}}  # lite1: not on cpu-2
    mixed = plan(p, variants=(("lite2", 0.6), ("lite0", 0.4)))
    assert ladders(p, mixed) == {"classify": {"lite2": 0.6, "lite1": 0.0, "lite0": 0.4}}
    floored = replace(p, accuracy_floor=0.76)
    assert ladders(floored, plan(floored)) == {"classify": {"lite2": 1.0, "lite1": 0.0}}
    assert ladders(p, plan(p, mode="milp")) == {} and ladders(p, plan(p, mode="inferline")) == {}
    configs = {c.stage: c for c in stage_configs("ic", plan(p), p, 3)}
    assert configs["classify"].routing == {"lite2": 1.0, "lite1": 0.0, "lite0": 0.0}
    assert configs["resize"].routing == {}
    assert {c.stage: c.routing for c in stage_configs("ic", plan(p, mode="milp"), p, 3)}["classify"] == {}


def test_each_rung_is_what_one_replica_of_the_pool_serves_on_it():
    p = problem()
    caps = stage_capacity(p, plan(p, replicas=2), (0.1, 1.0))["classify"]
    rungs = {r.variant: r for r in caps.ladder}
    assert [r.variant for r in caps.ladder] == ["lite2", "lite1", "lite0"]
    assert rungs["lite2"].rate_qps * 2 == pytest.approx(caps.rate_qps)  # the same numbers, per replica
    assert [x * 2 for x in rungs["lite2"].window_qps] == pytest.approx(caps.window_qps)
    assert rungs["lite0"].rate_qps == pytest.approx(2 / 0.027) and rungs["lite0"].service_ms == (15.0, 27.0)
    # one replica on lite0, of the pool that runs lite2 at 2 replicas: its own plan's numbers
    alone = stage_capacity(p, plan(p, variants=(("lite0", 1.0),)), (0.1, 1.0))["classify"]
    assert rungs["lite0"].rate_qps == pytest.approx(alone.rate_qps)
    assert rungs["lite0"].share == 0.0 and rungs["lite2"].share == 1.0


def test_a_replan_that_loads_models_waits_while_the_ladder_carries_the_burst():
    p = problem(rate_qps=80.0)  # lite2 on 2 cpu-1 replicas keeps up with 30.8; lite0 with 74.1 each
    serving = plan(p, replicas=1)
    assert ladder_keeps_up(p, serving) == pytest.approx(min(2 * 2 / 0.027, 2 * 2 / 0.007))
    other_hw = plan(p, hw="cpu-2", replicas=2)
    why = defers(p, other_hw, serving, None)
    assert "classify, resize" in why and "80.0 qps" in why
    assert defers(p, other_hw, serving, replace(serving, feasible=True)) == ""  # it holds: fallback decides
    assert defers(problem(rate_qps=200.0), other_hw, serving, None) == ""  # beyond the ladder: re-plan
    quiet = problem(rate_qps=20.0)  # its replicas keep up (28.6): a miss on latency, the tuner cannot mend it
    assert defers(quiet, other_hw, serving, replace(serving, feasible=False)) == ""
    assert defers(p, other_hw, plan(p, mode="inferline"), None) == ""  # no ladder, nothing to wait for


def test_a_replan_that_loads_no_model_waits_too_rather_than_reset_the_tuners_shares():
    """Run 3 of the loki step (docs/results.md): in the burst, a re-plan on the same hardware (so no
    model load) published half lite2, half lite1 over the tuner's lite0; the tuner moved them back
    within 0.6 s. It waits like one that loads models, and goes ahead once the plan in place holds."""
    p = problem(rate_qps=80.0)
    serving = plan(p, replicas=1)
    same = plan(p, variants=(("lite2", 0.3), ("lite0", 0.7)), replicas=2)
    assert named_variants(p, same) == named_variants(p, serving)  # nothing to load
    why = defers(p, same, serving, None)
    assert "reset the routing shares the tuner moves on classify" in why and "80.0 qps" in why
    assert defers(p, same, serving, replace(serving, feasible=True)) == ""  # the plan in place holds
    assert defers(problem(rate_qps=200.0), same, serving, None) == ""  # beyond the ladder: re-plan
