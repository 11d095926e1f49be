"""The MILP against brute force over the same analytical model, InferLine, and the INFaaS toy."""
from __future__ import annotations

import itertools
import math
from dataclasses import replace

import mip
import pytest

from slipstream.planner import milp
from slipstream.planner.inferline import InferLineOptions, plan_inferline
from slipstream.planner.plan import Config, stage_configs
from slipstream.planner.problem import Problem, parse_problem
from slipstream.loadgen.synthetic import random_problem

SOLVERS = ("highs", "cbc")


def path_ok(problem: Problem, lat: dict[str, float], budget: float) -> bool:
    return all(sum(lat[s] for s in p) <= budget + 1e-9 for p in problem.paths())


def brute_single(problem: Problem) -> float:
    """Cheapest one-config-per-stage plan, by enumerating every combination."""
    names = problem.topo_order
    per_stage = [stage_configs(problem, s) for s in names]
    best = math.inf
    for combo in itertools.product(*per_stage):
        lat = {c.stage: c.latency_ms for c in combo}
        if not path_ok(problem, lat, problem.slo_ms):
            continue
        reps = [c.replicas_for(problem.stage_rate(c.stage)) for c in combo]
        if problem.max_replicas is not None and sum(reps) > problem.max_replicas:
            continue
        if problem.accuracy_floor and any(math.prod(c.accuracy for c in combo if c.stage in p) < problem.accuracy_floor
                                          for p in problem.paths()):
            continue
        best = min(best, sum(n * c.price for n, c in zip(reps, combo)))
    return best


def cheapest_cover(configs: list[Config], need: float) -> float:
    """Min cost of integer replicas whose capacity covers ``need`` (exhaustive recursion)."""
    if need <= 1e-9:
        return 0.0
    if not configs:
        return math.inf
    c, rest = configs[0], configs[1:]
    best = math.inf
    for n in range(0, math.ceil(need / c.throughput_qps - 1e-9) + 1):
        best = min(best, n * c.price + cheapest_cover(rest, need - n * c.throughput_qps))
    return best


def brute_mixed(problem: Problem) -> float:
    """Stages may mix configs: a stage's latency is its slowest used config. For each threshold per
    stage, the cheapest cover using configs under it; then the best feasible threshold combination."""
    names = problem.topo_order
    options = []
    for s in names:
        cs = stage_configs(problem, s)
        opts = {}
        for t in sorted({c.latency_ms for c in cs}):
            opts[t] = cheapest_cover([c for c in cs if c.latency_ms <= t], problem.stage_rate(s))
        options.append(opts)
    best = math.inf
    for combo in itertools.product(*(o.items() for o in options)):
        lat = {s: t for s, (t, _) in zip(names, combo)}
        if path_ok(problem, lat, problem.slo_ms):
            best = min(best, sum(cost for _, cost in combo))
    return best


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("seed", range(6))
def test_milp_equals_brute_force_single(seed, solver):
    p = random_problem(seed, stages=3, variants=2, hardware=2, batch_sizes=(1, 2, 4),
                       rate_qps=[20, 60, 150][seed % 3], slo_ms=[150, 300][seed % 2], chain=seed % 2 == 0)
    expect = brute_single(p)
    plan = milp.solve(p, milp.MilpOptions(solver=solver))
    if math.isinf(expect):
        assert not plan.feasible and plan.reason
    else:
        assert plan.feasible
        assert plan.cost_per_hour == pytest.approx(expect, rel=1e-6)
        assert plan.analytic_latency_ms <= p.slo_ms + 1e-6


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("seed", range(4))
def test_milp_equals_brute_force_mixed(seed, solver):
    p = random_problem(100 + seed, stages=2, variants=1, hardware=2, batch_sizes=(1, 4),
                       rate_qps=[40, 90][seed % 2], slo_ms=200, mix=True)
    expect = brute_mixed(p)
    plan = milp.solve(p, milp.MilpOptions(solver=solver))
    assert plan.feasible == (not math.isinf(expect))
    if plan.feasible:
        assert plan.cost_per_hour == pytest.approx(expect, rel=1e-6)


@pytest.mark.parametrize("solver", SOLVERS)
def test_cluster_cap_and_accuracy_floor_match_brute_force(solver):
    for seed in range(4):
        p = random_problem(200 + seed, stages=2, variants=3, hardware=2, batch_sizes=(1, 2, 4), rate_qps=80,
                           slo_ms=250, max_replicas=6, accuracy_floor=0.45)
        expect = brute_single(p)
        plan = milp.solve(p, milp.MilpOptions(solver=solver))
        assert plan.feasible == (not math.isinf(expect)), plan.reason
        if plan.feasible:
            assert plan.cost_per_hour == pytest.approx(expect, rel=1e-6)
            assert sum(sp.replicas for sp in plan.stages) <= 6
            assert plan.accuracy >= 0.45


@pytest.mark.parametrize("seed", range(3))
def test_milp_never_costs_more_than_inferline(seed):
    # one variant per stage (InferLine does not choose variants), two hardware types, batches
    p = random_problem(300 + seed, stages=2, variants=1, hardware=2, batch_sizes=(1, 2, 4, 8),
                       rate_qps=40, slo_ms=300, sim_seconds=20)
    greedy = plan_inferline(p, InferLineOptions(max_simulations=150))
    solved = milp.solve(p, milp.MilpOptions(solver="highs"))
    assert greedy.feasible and solved.feasible
    assert solved.cost_per_hour <= greedy.cost_per_hour + 1e-9


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("qps, slo, counts, cost", [
    (10, 300, {"A": 2}, 2.0),
    (10, 50, {"B": 1}, 3.0),
    (1000, 300, {"B": 2, "C": 1}, 22.0),
])
def test_infaas_toy_tables_2_and_3(toy, solver, qps, slo, counts, cost):
    plan = milp.solve(toy(qps, slo), milp.MilpOptions(solver=solver))
    got: dict[str, int] = {}
    for a in plan.stages[0].assignments:
        got[a.variant] = got.get(a.variant, 0) + a.replicas
    assert got == counts
    assert plan.cost_per_hour == pytest.approx(cost)


def test_infeasible_reason_names_the_path():
    p = random_problem(1, stages=3, variants=1, hardware=1, slo_ms=5)
    plan = milp.solve(p)
    assert not plan.feasible
    assert "budget" in plan.reason


def test_accuracy_objective_buys_accuracy_with_weight():
    p = random_problem(5, stages=2, variants=3, hardware=2, batch_sizes=(1, 2, 4), rate_qps=30, slo_ms=400)
    cheap = milp.solve(p)
    rich = milp.solve(replace(p, objective="accuracy", accuracy_weight=1000.0))
    assert rich.accuracy > cheap.accuracy
    assert rich.cost_per_hour >= cheap.cost_per_hour


def test_runner_up_differs_and_costs_no_less():
    p = random_problem(9, stages=2, variants=2, hardware=2, batch_sizes=(1, 2, 4), rate_qps=30, slo_ms=400)
    best = milp.solve(p)
    second = milp.runner_up(p, best)
    assert second.feasible
    assert milp.chosen_set(second) != milp.chosen_set(best)
    assert second.cost_per_hour >= best.cost_per_hour - 1e-9


def one_stage(variants: list[tuple[str, float, dict]], qps: float, slo_ms: float = 400):
    """One stage on one hardware type (1 $/h): ``variants`` as (name, accuracy, {batch: ms})."""
    return parse_problem({
        "slo_ms": slo_ms, "arrival": {"rate_qps": qps}, "hardware": {"h": {"cost_per_hour": 1}},
        "batch_sizes": sorted({b for _, _, pts in variants for b in pts}),
        "stages": [{"name": "s", "variants": [
            {"name": n, "accuracy": a, "latency_ms": {"h": {str(b): ms for b, ms in pts.items()}}}
            for n, a, pts in variants]}]})


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("order", [1, -1])
def test_equal_cost_takes_the_faster_variant(solver, order):
    # one replica of either serves 10 qps at the same price; batches on a CPU add no capacity (lite0
    # and lite2 on one thread: the b=4 batch is about 4 singles; here 2 % more), only a formation wait
    fast = ("fast", 0.75, {1: 12.0, 4: 47.0})
    slow = ("slow", 0.78, {1: 24.0, 4: 96.0})
    plan = milp.solve(one_stage([fast, slow][::order], qps=10), milp.MilpOptions(solver=solver))
    (a,) = plan.stages[0].assignments
    assert (a.variant, a.max_batch, a.replicas) == ("fast", 1, 1)
    assert any(n.startswith("tie-break: of the plans at 1 $/h") for n in plan.notes)


@pytest.mark.parametrize("solver", SOLVERS)
def test_equal_cost_takes_a_batch_that_buys_capacity(solver):
    # an accelerator: batch 8 serves 2.7x what batch 1 does at the same price, so its formation wait
    # is worth it; batch 2 (+25 % capacity) is not taken over batch 8
    gpu = ("v", 0.8, {1: 5.0, 2: 8.0, 8: 15.0})
    plan = milp.solve(one_stage([gpu], qps=100), milp.MilpOptions(solver=solver))
    (a,) = plan.stages[0].assignments
    assert (a.max_batch, a.replicas) == (8, 1)


@pytest.mark.parametrize("mix", [False, True])
def test_the_cost_objective_and_its_tie_break_are_one_solve(monkeypatch, mix):
    calls = []
    optimize = mip.Model.optimize
    monkeypatch.setattr(mip.Model, "optimize", lambda self, *a, **k: calls.append(1) or optimize(self, *a, **k))
    plan = milp.solve(random_problem(3, stages=3, rate_qps=60, mix=mix), milp.MilpOptions())
    assert plan.feasible and len(calls) == 1
    assert any(n.startswith("tie-break: of the plans at") for n in plan.notes)
