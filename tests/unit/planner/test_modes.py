"""Planner modes behind one interface, and the estimator check with tightening rounds."""
from __future__ import annotations

from dataclasses import replace

import pytest

from slipstream.planner.estimator import simulate
from slipstream.planner.modes import MODES, CoarsePlanner, LokiPlanner, MilpPlanner, make_planner
from slipstream.streams.arrivals import peak_rate_sliding
from slipstream.loadgen.synthetic import random_problem


@pytest.fixture(scope="module")
def problem():
    return random_problem(11, stages=3, variants=2, hardware=3, batch_sizes=(1, 2, 4, 8), rate_qps=60,
                          slo_ms=300, sim_seconds=30)


@pytest.fixture(scope="module")
def witness(problem):
    """A feasible plan exists for ``problem``: cg-peak's, replayed through the estimator here."""
    plan = make_planner("cg-peak", validate=False).plan(problem)
    sim = simulate(replace(problem, seed=0), plan)
    assert sim.attainment >= 0.99 and sim.p99_ms <= problem.slo_ms
    return plan


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_finds_a_feasible_plan_where_one_exists(problem, witness, mode):
    plan = make_planner(mode).plan(problem)
    assert plan.mode == mode
    assert [s.stage for s in plan.stages] == list(problem.topo_order)
    assert plan.cost_per_hour > 0
    assert plan.feasible, plan.reason
    # and it is: the plan replayed through the estimator here, not the mode's own verdict
    sim = simulate(replace(problem, seed=1), plan)
    assert sim.attainment >= 0.99 and sim.p99_ms <= problem.slo_ms, (sim.attainment, sim.p99_ms)


def test_milp_rounds_tighten_until_the_estimator_agrees(problem):
    plan = MilpPlanner().plan(problem)
    assert plan.feasible and plan.rounds
    assert plan.rounds[-1].feasible
    budgets = [r.budget_ms for r in plan.rounds]
    assert budgets == sorted(budgets, reverse=True)
    assert all(not r.feasible for r in plan.rounds[:-1])


def test_no_validate_skips_the_estimator(problem):
    plan = make_planner("milp", validate=False).plan(problem)
    assert plan.predicted_p99_ms is None and len(plan.rounds) == 1


def test_loki_hardware_scaling_then_accuracy_scaling():
    # one hardware type (Loki's homogeneous cluster): min cost = min servers, so a cap below the
    # step-1 server count forces accuracy scaling
    problem = random_problem(12, stages=3, variants=3, hardware=1, batch_sizes=(1, 2, 4, 8), rate_qps=120,
                             slo_ms=400, sim_seconds=10)
    free = LokiPlanner(validate=False).plan(problem)
    assert free.feasible and "step 1" in free.notes[0]
    top = {st.name: max(st.variants, key=lambda v: v.accuracy).name for st in problem.stages}
    assert all(a.variant == top[sp.stage] for sp in free.stages for a in sp.assignments)
    total = sum(sp.replicas for sp in free.stages)
    capped = LokiPlanner(validate=False).plan(replace(problem, max_replicas=total - 1))
    assert capped.feasible, capped.reason
    assert "step 2" in capped.notes[0]
    assert sum(sp.replicas for sp in capped.stages) <= total - 1
    assert capped.accuracy < free.accuracy
    for sp in capped.stages:
        assert sum(a.weight for a in sp.assignments) == pytest.approx(1.0)


def test_cg_peak_provisions_for_the_slo_window_peak(problem):
    peak = CoarsePlanner("peak", validate=False).plan(problem)
    mean = CoarsePlanner("mean", validate=False).plan(problem)
    assert peak.rate_qps == pytest.approx(peak_rate_sliding(problem.arrivals_s, problem.slo_ms / 1000))
    assert peak.rate_qps > mean.rate_qps
    assert peak.cost_per_hour >= mean.cost_per_hour
    # whole pipeline as a unit: every stage has the same replica count and batch
    assert len({sp.replicas for sp in peak.stages}) == 1


def test_unknown_mode_is_an_error():
    with pytest.raises(ValueError, match="mode"):
        make_planner("nope")
