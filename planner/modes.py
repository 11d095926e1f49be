"""Planner modes behind one interface, and the estimator check every plan goes through.

``Planner`` is a protocol: ``name`` and ``plan(problem) -> Plan``. Modes:

- ``milp``: ``slipstream.planner.milp`` (IPA/INFaaS). Checked by the estimator; when the simulated p99 misses
  the SLO the plan is re-solved with the latency budget shrunk by ``shrink`` (10 %) and the planning
  rate raised by ``grow`` (10 %), up to ``max_rounds``; every round is reported.
- ``loki``: step 1 hardware scaling (most accurate variants only, min cost, SLO halved as in the
  paper); if that is infeasible (the cluster cap), step 2 accuracy scaling (all variants, max expected
  log accuracy, several variants per stage with routing weights). Same check and tightening.
- ``inferline``: ``slipstream.planner.inferline`` (the estimator is inside the search).
- ``cg-mean`` / ``cg-peak``: InferLine's coarse-grained baselines: the whole pipeline is one unit
  (each stage's most accurate variant on its fastest hardware, one common max batch: the largest
  whose analytical path latency fits the SLO), replicated to the trace's mean rate, or its peak rate
  over a sliding window as long as the SLO. Checked, never tightened (they are baselines).

No mode refuses: ``make_planner`` wraps each in :class:`NeverRefuses`, which turns an infeasible
result into the highest-capacity plan the mode's rules allow (``slipstream.planner.fallback``).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Protocol

from ..streams.arrivals import mean_rate, peak_rate_sliding
from .cores import host_excess
from .estimator import Unprofiled, simulate
from .fallback import serve_anyway
from .inferline import InferLineOptions, plan_inferline, top_variant
from .plan import Assignment, Plan, Round, evaluate, formation_ms, infeasible
from .problem import Problem

MODES = ("milp", "inferline", "loki", "cg-mean", "cg-peak")  # the one list: CLI choices read it too


class Planner(Protocol):
    name: str

    def plan(self, problem: Problem) -> Plan: ...


def check(problem: Problem, plan: Plan, percentile: float = 99.0) -> Plan:
    """Attach the estimator's p99 and attainment on the problem's sample trace; a plan that
    oversubscribes the host's cores at the problem's rate (``slipstream.planner.cores.host_excess``) fails
    before it."""
    if not plan.feasible:
        return plan
    over = host_excess(problem, plan)
    if over:
        return replace(plan, feasible=False, reason=over)
    try:
        res = simulate(problem, plan)
    except Unprofiled as exc:
        return replace(plan, feasible=False, reason=f"estimator: the deployed form cannot be simulated: {exc}")
    ok = res.meets_slo(percentile)
    return replace(plan, predicted_p99_ms=res.p99_ms, attainment=res.attainment, feasible=ok,
                   reason="" if ok else (f"estimator: attainment {res.attainment:.4f} < {percentile / 100:.2f} "
                                         f"(p99 {res.p99_ms:.1f} ms, SLO {problem.slo_ms:.0f} ms, "
                                         f"drops {res.drop_rate:.2%})"))


@dataclass(frozen=True)
class Tightening:
    shrink: float = 0.9
    grow: float = 1.1
    max_rounds: int = 5


def tightened(problem: Problem, solve_round, validate: bool, t: Tightening = Tightening()) -> Plan:
    """Solve, check with the estimator, shrink the budget / grow the rate and re-solve on a miss."""
    budget, rate = problem.slo_ms, problem.rate_qps
    rounds: list[Round] = []
    t0 = time.perf_counter()
    plan = None
    for _ in range(t.max_rounds if validate else 1):
        plan = solve_round(budget, rate, plan)
        if not plan.feasible:
            rounds.append(Round(budget, rate, 0.0, None, None, False))
            break
        if validate:
            plan = check(problem, plan)
        rounds.append(Round(budget, rate, plan.cost_per_hour, plan.predicted_p99_ms, plan.attainment,
                            plan.feasible))
        if plan.feasible:
            break
        budget *= t.shrink
        rate *= t.grow
    return replace(plan, rounds=tuple(rounds), solve_time_s=time.perf_counter() - t0)


@dataclass(frozen=True)
class MilpPlanner:
    solver: str = "highs"
    time_limit_s: float = 10.0
    validate: bool = True
    name: str = "milp"

    def plan(self, problem: Problem, warm: Plan | None = None) -> Plan:
        from . import milp  # the solver (extra `planner`) loads with the first MILP plan

        def one(budget: float, rate: float, prev: Plan | None) -> Plan:
            return milp.solve(problem, milp.MilpOptions(self.solver, self.time_limit_s, budget, rate,
                                                        mode=self.name), warm=prev or warm)
        return tightened(problem, one, self.validate)


@dataclass(frozen=True)
class LokiPlanner:
    solver: str = "highs"
    time_limit_s: float = 10.0
    validate: bool = True
    name: str = "loki"

    def plan(self, problem: Problem) -> Plan:
        from . import milp

        top = {s.name: frozenset({top_variant(problem, s.name)}) for s in problem.stages}

        def one(budget: float, rate: float, prev: Plan | None) -> Plan:
            hw = milp.solve(problem, milp.MilpOptions(self.solver, self.time_limit_s, budget, rate, "loki",
                                                      "cost", top, True, self.name))
            if hw.feasible:
                return replace(hw, notes=("step 1: hardware scaling (most accurate variants)",) + hw.notes)
            acc = milp.solve(problem, milp.MilpOptions(self.solver, self.time_limit_s, budget, rate, "loki",
                                                       "max-accuracy", None, True, self.name))
            step = "step 2: accuracy scaling (hardware scaling infeasible: " + hw.reason + ")"
            return replace(acc, notes=(step,) + acc.notes)
        return tightened(problem, one, self.validate)


@dataclass(frozen=True)
class InferLinePlanner:
    validate: bool = True
    max_simulations: int = 400
    name: str = "inferline"

    def plan(self, problem: Problem) -> Plan:
        plan = plan_inferline(problem, InferLineOptions(max_simulations=self.max_simulations, mode=self.name))
        return check(problem, plan) if self.validate else plan


@dataclass(frozen=True)
class CoarsePlanner:
    kind: str = "peak"  # peak | mean
    validate: bool = True

    @property
    def name(self) -> str:
        return f"cg-{self.kind}"

    def plan(self, problem: Problem) -> Plan:
        t0 = time.perf_counter()
        arr = problem.arrivals_s
        if arr.size:
            rate = peak_rate_sliding(arr, problem.slo_ms / 1000.0) if self.kind == "peak" else mean_rate(arr)
        else:
            rate = problem.rate_qps
        choice = {}
        for s in problem.topo_order:
            v = top_variant(problem, s)
            curves = problem.curves_on_host(s, v)
            if not curves:
                return infeasible(self.name, f"stage {s}: no hardware of {v} fits the host's cores",
                                  solve_time_s=time.perf_counter() - t0, rate_qps=rate)
            choice[s] = (v, min(curves, key=lambda h: (curves[h].ms(1), problem.hardware[h].cost_per_hour)))

        def curve(s: str):
            v, h = choice[s]
            return problem.stage(s).variant(v).latency[h]

        def path_ms(b: int) -> float:
            return max(sum(curve(s).ms(min(b, max(curve(s).points_ms))) +
                           formation_ms(min(b, max(curve(s).points_ms)), problem.stage_rate(s, rate))
                           for s in p) for p in problem.paths())
        fits = [b for b in problem.batch_sizes if path_ms(b) <= problem.slo_ms]
        if not fits:
            return infeasible(self.name, f"batch-1 pipeline latency {path_ms(1):.1f} ms > SLO",
                              solve_time_s=time.perf_counter() - t0, rate_qps=rate)
        b = max(fits)
        unit = min(curve(s).throughput_qps(min(b, max(curve(s).points_ms))) / problem.visit_ratio(s)
                   for s in problem.topo_order if problem.visit_ratio(s) > 0)
        k = max(1, math.ceil(rate / unit - 1e-9))
        stages = {}
        for s in problem.topo_order:
            bs = min(b, max(curve(s).points_ms))
            timeout = min(formation_ms(bs, problem.stage_rate(s, rate)), curve(s).ms(bs))
            stages[s] = (Assignment(choice[s][0], choice[s][1], bs, k, 1.0, timeout),)
        plan = evaluate(problem, self.name, stages, rate_qps=rate, solve_time_s=time.perf_counter() - t0,
                        notes=(f"pipeline unit x{k} at max batch {max(a[0].max_batch for a in stages.values())} "
                               f"for {rate:.1f} qps",))
        if problem.max_replicas is not None and k * len(stages) > problem.max_replicas:
            return replace(plan, feasible=False, reason=f"{k} pipeline units exceed max_replicas")
        if problem.max_stage_replicas is not None and k > problem.max_stage_replicas:
            return replace(plan, feasible=False, reason=f"{k} pipeline units exceed max_stage_replicas")
        return check(problem, plan) if self.validate else plan


@dataclass(frozen=True)
class NeverRefuses:
    """A mode that, when no plan meets the SLO, returns the highest-capacity plan its rules allow,
    flagged infeasible (``slipstream.planner.fallback.serve_anyway``); ``top_only``: the mode keeps each stage's
    most accurate variant (inferline, the cg baselines)."""

    inner: Planner
    top_only: bool

    @property
    def name(self) -> str:
        return self.inner.name

    def plan(self, problem: Problem) -> Plan:
        return serve_anyway(problem, self.inner.plan(problem), top_only=self.top_only)


def make_planner(mode: str, *, solver: str = "highs", time_limit_s: float = 10.0,
                 validate: bool = True) -> Planner:
    """The planner of ``mode``; it never refuses (:class:`NeverRefuses`)."""
    if mode == "milp":
        return NeverRefuses(MilpPlanner(solver, time_limit_s, validate), False)
    if mode == "loki":
        return NeverRefuses(LokiPlanner(solver, time_limit_s, validate), False)
    if mode == "inferline":
        return NeverRefuses(InferLinePlanner(validate), True)
    if mode in ("cg-mean", "cg-peak"):
        return NeverRefuses(CoarsePlanner(mode.split("-")[1], validate), True)
    raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
