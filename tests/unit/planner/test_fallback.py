"""No mode refuses: on a problem no plan can meet, every mode returns the highest-capacity plan its
rules allow, flagged infeasible with its capacity (slipstream.planner.fallback), and never raises."""
from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from slipstream.planner.capacity import capacity_qps
from slipstream.streams.control_rules import check
from slipstream.planner.metrics import PlannerMetrics
from slipstream.planner.modes import MODES, make_planner
from slipstream.planner.problem import parse_problem
from slipstream.streams.arrivals import poisson_arrivals
from slipstream.planner.service import Replanner, ReplanSettings, ReplanState, stage_configs

LAT = {"resize": {"cpu-1": {"1": 4, "2": 7, "4": 13, "8": 25}, "cpu-2": {"1": 3, "2": 5, "4": 9, "8": 17}},
       "lite0": {"cpu-1": {"1": 15, "2": 27, "4": 52, "8": 100}, "cpu-2": {"1": 9, "2": 16, "4": 30, "8": 58}},
       "lite2": {"cpu-1": {"1": 28, "2": 52, "4": 100, "8": 196}, "cpu-2": {"1": 16, "2": 30, "4": 57, "8": 110}}}
DOC = {"slo_ms": 400, "arrival": {"rate_qps": 500, "sim_seconds": 5}, "max_replicas": 4, "hop_ms": 6.0,
       "hardware": {"cpu-1": {"cost_per_hour": 0.05}, "cpu-2": {"cost_per_hour": 0.10, "threads": 2}},
       "stages": [{"name": "resize", "variants": [{"name": "resize", "latency_ms": LAT["resize"]}]},
                  {"name": "classify", "variants": [{"name": "lite0", "accuracy": 0.751, "latency_ms": LAT["lite0"]},
                                                    {"name": "lite2", "accuracy": 0.776, "latency_ms": LAT["lite2"]}]}],
       "edges": [{"from": "resize", "to": "classify"}]}


@pytest.fixture(scope="module")
def overloaded():
    """500 qps on at most 4 replicas: the best plan serves about a third of it."""
    return parse_problem(DOC)


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_serves_an_overload_with_its_highest_capacity_plan(overloaded, mode, caplog):
    with caplog.at_level(logging.WARNING, logger="slipstream.planner.fallback"):
        plan = make_planner(mode, time_limit_s=5.0).plan(overloaded)
    assert not plan.feasible and plan.reason
    assert [sp.stage for sp in plan.stages] == ["resize", "classify"]
    assert sum(sp.replicas for sp in plan.stages) == 4  # the whole cap
    cap, neck = capacity_qps(overloaded, plan)
    assert plan.capacity_qps == pytest.approx(cap) and 0 < cap < overloaded.rate_qps
    assert neck == "classify"
    said = [r.getMessage() for r in caplog.records]
    assert any(f"{cap:.1f} qps for 500.0 qps, short by {500 - cap:.1f} qps at stage classify" in m for m in said)
    assert plan.notes[0].startswith(f"infeasible: no {mode} plan meets the SLO")
    if mode in ("inferline", "cg-peak", "cg-mean"):  # modes that keep the most accurate variant
        assert plan.stage("classify").primary.variant == "lite2"
    else:  # the fastest: lite0 on 2 threads, the largest batch whose no-queue latency fits
        assert plan.stage("classify").primary.variant == "lite0"
    # the highest capacity within the cap: no other split of 4 replicas over these configs serves more
    classify, resize = plan.stage("classify").primary, plan.stage("resize").primary
    assert classify.replicas == 3 and resize.replicas == 1


@pytest.mark.parametrize("mode", MODES)
def test_a_latency_miss_still_deploys_a_plan_that_keeps_up(overloaded, mode):
    tight = replace(overloaded, slo_ms=20.0, rate_qps=10.0, arrivals_s=poisson_arrivals(10.0, 5.0, 1))
    plan = make_planner(mode, time_limit_s=5.0).plan(tight)
    assert not plan.feasible and plan.stages
    assert plan.capacity_qps >= 10.0  # enough capacity: the SLO is missed on latency
    assert "missed on latency" in plan.notes[0]


def test_a_feasible_plan_is_left_alone(overloaded):
    light = replace(overloaded, rate_qps=5.0, arrivals_s=poisson_arrivals(5.0, 10.0, 2))
    plan = make_planner("milp").plan(light)
    assert plan.feasible and plan.capacity_qps is None and not plan.notes[0].startswith("infeasible")


def test_the_planner_service_publishes_the_highest_capacity_plan_and_says_so(overloaded):
    replanner = Replanner(overloaded, "p", ReplanSettings(mode="loki", time_limit_s=5.0))
    arrivals = np.sort(poisson_arrivals(500.0, 5.0, 3))
    out, state = replanner.step(ReplanState(), arrivals, int(5.0 * 1e9))
    assert not out.plan.feasible and out.changed and state.epoch == 1
    assert [c.stage for c in out.configs] == ["resize", "classify"]
    doomed = replace(out.plan, predicted_p99_ms=float("inf"))  # more than 1 % late: an infinite p99
    for c in (*out.configs, *stage_configs("p", doomed, overloaded, 2)):  # the workers apply them:
        check("StageConfig", c.stage, c.to_dict(), "p")  # the control rules accept them
    registry = CollectorRegistry()
    PlannerMetrics("p", registry).observe(out)
    assert registry.get_sample_value("slipstream_planner_infeasible", {"pipeline": "p"}) == 1
    assert registry.get_sample_value("slipstream_planner_shortfall_requests_per_second", {"pipeline": "p"}) \
        == pytest.approx(out.forecast_qps - out.plan.capacity_qps)
    assert registry.get_sample_value("slipstream_planner_replans_total", {"pipeline": "p", "outcome": "infeasible"}) == 1


def test_an_infeasible_replan_replaces_the_serving_plan_only_when_it_serves_more(overloaded, caplog):
    replanner = Replanner(overloaded, "p", ReplanSettings(mode="milp", time_limit_s=5.0))
    overload = np.sort(poisson_arrivals(500.0, 5.0, 3))
    out, state = replanner.step(ReplanState(), overload, int(5.0 * 1e9))
    highest = out.plan  # infeasible, the highest capacity the cap allows: deployed over nothing
    assert not highest.feasible and out.changed and state.plan is highest
    # a later overload finds no better plan: the one in place stays, nothing is republished
    with caplog.at_level(logging.WARNING, logger="slipstream.planner.service"):
        again, state2 = replanner.step(state, overload + 0.0, int(5.0 * 1e9))
    assert not again.plan.feasible and not again.changed and again.configs == ()
    assert state2.plan is highest and state2.epoch == state.epoch
    assert any("that plan stays" in r.getMessage() for r in caplog.records)
    # a smaller serving plan (one replica per stage) is replaced by the higher-capacity one
    small = make_planner("milp").plan(replace(overloaded, rate_qps=5.0, arrivals_s=poisson_arrivals(5.0, 10.0, 2)))
    assert capacity_qps(overloaded, small)[0] < capacity_qps(overloaded, highest)[0]
    out3, state3 = replanner.step(replace(state, plan=small), overload + 0.0, int(5.0 * 1e9))
    assert out3.changed and state3.plan is out3.plan and [c.replicas for c in out3.configs] != [1, 1]


def test_an_infeasible_replan_keeps_a_serving_plan_that_keeps_up_with_the_forecast(overloaded):
    """A re-plan that misses the SLO on latency, not capacity, must not pay for more replicas: the
    serving plan stays while its capacity covers the forecast, and is replaced once it does not."""
    from slipstream.planner.fallback import replaces

    highest = make_planner("milp").plan(overloaded)
    assert not highest.feasible
    small = make_planner("milp").plan(replace(overloaded, rate_qps=5.0, arrivals_s=poisson_arrivals(5.0, 10.0, 2)))
    have = capacity_qps(overloaded, small)[0]
    assert have < capacity_qps(overloaded, highest)[0]
    assert not replaces(replace(overloaded, rate_qps=0.8 * have), highest, small)  # keeps up: stays
    assert replaces(replace(overloaded, rate_qps=1.5 * have), highest, small)  # short: replaced


@pytest.mark.parametrize("mode", MODES)
def test_no_mode_plans_a_stage_above_the_per_stage_cap(overloaded, mode):
    """A host that runs at most 2 replicas of a stage: the highest-capacity plan spreads the cluster
    cap of 4 as 2 + 2, never the 1 + 3 it chooses without the per-stage cap, so the capacity it states
    is what runs."""
    capped = replace(overloaded, max_stage_replicas=2)
    plan = make_planner(mode, time_limit_s=5.0).plan(capped)
    assert not plan.feasible
    assert [sp.replicas for sp in plan.stages] == [2, 2]
    assert plan.capacity_qps == pytest.approx(capacity_qps(capped, plan)[0])


@pytest.mark.parametrize("mode, rate", [("milp", 180.0), ("loki", 180.0), ("inferline", 100.0)])
def test_a_feasible_plan_keeps_to_the_per_stage_cap(overloaded, mode, rate):
    """Where the cheapest plan needs 3 replicas of a stage, a per-stage cap of 2 makes the planner buy
    faster replicas instead, and the plan still meets the SLO."""
    base = replace(overloaded, rate_qps=rate, max_replicas=None, arrivals_s=poisson_arrivals(rate, 5.0, 4))
    free = make_planner(mode, time_limit_s=5.0).plan(base)
    assert free.feasible and max(sp.replicas for sp in free.stages) > 2, "the uncapped plan must need > 2"
    plan = make_planner(mode, time_limit_s=5.0).plan(replace(base, max_stage_replicas=2))
    assert plan.feasible and max(sp.replicas for sp in plan.stages) <= 2


def test_an_infeasible_plan_prints_its_p99_as_not_validated(overloaded):
    """The demo printed the planner's p99 with ``:.1f`` and crashed after a run whose plan was the
    fallback (no estimator p99): every printer goes through ``Plan.p99_text``."""
    plan = make_planner("milp", time_limit_s=5.0).plan(overloaded)
    assert plan.predicted_p99_ms is None and plan.p99_text() == "not validated"
    assert replace(plan, predicted_p99_ms=123.456).p99_text() == "123.5 ms"
