"""The MILP planner (IPA's integer program, INFaaS's accuracy floor, Loki's two steps) on python-mip.

Data -> variables -> objective -> constraints -> optimize -> status -> values, as python-mip's
examples do; no ``mip`` object leaves this module. One binary ``use`` and one integer ``rep`` per
(stage, variant, hardware, batch) config, so a stage may mix configs (INFaaS's "2B + 1C"):

- ``rep[c] >= use[c]``, ``rep[c] <= cap_c * use[c]`` and ``sum_c use[c] >= 1`` per stage
- capacity: ``sum_c rep[c] * b_c / l_c(b_c) >= lambda_s``
- latency: ``lat[s] >= latency_c * use[c]`` and, per source-to-sink path, ``sum lat[s] <= budget``,
  with ``latency_c = l(b) + (b - 1) / lambda_s`` (model ``ipa``) or ``l(b)`` against half the SLO
  (model ``loki``: queueing assumed equal to execution)
- cluster cap ``sum rep <= max_replicas``; accuracy floor on every path
  ``sum_s minlog[s] >= log(floor)`` with ``minlog[s] <= log a_c + M (1 - use[c])`` (the worst
  variant a request can be routed to; logs make the product of accuracies linear)
- objectives: ``cost`` = min sum rep x price, then at that cost (two more solves) the fastest plan
  among those with ``h`` within 10 % of its most, ``h <= capacity_s / lambda_s`` for every stage;
  ``accuracy`` = max weight x expected log pipeline
  accuracy - cost, where traffic shares ``flow[c] <= rep[c] * mu_c`` route the stage's items and the
  expected log accuracy of a path is sum over its stages of sum_c flow[c] / lambda_s x log a_c
  (= log of the product of accuracies for single-config stages; IPA sums accuracies instead);
  ``max-accuracy`` (Loki step 2) = the accuracy term alone with a tiny cost tie-breaker.
"""
from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

try:
    import mip
except ImportError as exc:  # the extra `planner`: worker installs leave the solver out
    raise ImportError("the MILP planner needs python-mip: pip install 'slipstream[planner]'") from exc

from planner.plan import Assignment, Config, Plan, assignment_for, evaluate, infeasible, stage_configs
from planner.problem import Problem

SOLVERS = {"highs": "HIGHS", "cbc": "CBC"}
TIE = 1e-6  # tie-breaker weight: fewer configs per stage
HEADROOM_SLACK = 0.1  # the cost objective's tie-break: within this of the most headroom, the fastest


@dataclass(frozen=True)
class MilpOptions:
    solver: str = "highs"
    time_limit_s: float = 10.0
    budget_ms: float | None = None  # path latency budget; default the SLO
    rate_qps: float | None = None  # planning rate; default problem.rate_qps
    latency_model: str = "ipa"  # ipa | loki
    objective: str | None = None  # cost | accuracy | max-accuracy; default problem.objective
    variants: Mapping[str, frozenset[str]] | None = None  # allowed variants per stage
    allow_mix: bool | None = None  # several configs per stage; default problem.mix
    mode: str = "milp"
    exclude: tuple[frozenset, ...] = ()  # no-good cuts: config sets (stage, variant, hw, batch) not to pick again


def _name(*parts: object) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", "_".join(str(p) for p in parts))


def diagnose(problem: Problem, configs: Mapping[str, list[Config]], budget: float, rate: float,
             opts: MilpOptions) -> str:
    """Why a problem has no solution, in words (checked in order of the usual culprits)."""
    def lat(c: Config) -> float:
        return c.exec_ms if opts.latency_model == "loki" else c.latency_ms
    empty = [s for s, cs in configs.items() if not cs]
    if empty:
        return (f"no config of stage(s) {empty} fits the latency budget {budget:.1f} ms"
                + (f" with accuracy >= {problem.accuracy_floor}" if problem.accuracy_floor else ""))
    for p in problem.paths():
        fastest = sum(min(lat(c) for c in configs[s]) for s in p)
        if fastest > budget + 1e-9:
            return (f"path {'->'.join(p)}: even the fastest configs take {fastest:.1f} ms > budget "
                    f"{budget:.1f} ms")
    need = {s: math.ceil(problem.stage_rate(s, rate) / max(c.throughput_qps for c in cs) - 1e-9) or 1
            for s, cs in configs.items()}  # each stage's fewest replicas, on its fastest config
    cap = problem.max_stage_replicas
    over = [s for s in need if cap is not None and need[s] > cap]
    if over:
        return f"stage {over[0]}: {need[over[0]]} replicas needed at {rate:.1f} qps > max_stage_replicas {cap}"
    if problem.max_replicas is not None and sum(need.values()) > problem.max_replicas:
        return f"max_replicas {problem.max_replicas} < {sum(need.values())} replicas needed at {rate:.1f} qps"
    if problem.accuracy_floor:
        for p in problem.paths():
            best = math.prod(max(c.accuracy for c in configs[s]) for s in p)
            if best < problem.accuracy_floor:
                return f"path {'->'.join(p)}: best accuracy {best:.3f} < floor {problem.accuracy_floor}"
    return "no plan meets latency, capacity and accuracy together"


def solve(problem: Problem, opts: MilpOptions = MilpOptions(), warm: Plan | None = None) -> Plan:
    t0 = time.perf_counter()
    rate = problem.rate_qps if opts.rate_qps is None else opts.rate_qps
    budget = problem.slo_ms if opts.budget_ms is None else opts.budget_ms
    if opts.latency_model == "loki":
        budget = budget / 2.0
    objective = opts.objective or problem.objective
    floor = problem.accuracy_floor

    def lat(c: Config) -> float:
        return c.exec_ms if opts.latency_model == "loki" else c.latency_ms

    configs: dict[str, list[Config]] = {}
    for s in problem.topo_order:
        allowed = None if opts.variants is None else set(opts.variants.get(s, ()))
        cs = stage_configs(problem, s, rate, allowed)
        cs = [c for c in cs if lat(c) <= budget + 1e-9 and (not floor or c.accuracy >= floor)]
        configs[s] = cs
    paths = problem.paths()
    if any(not cs for cs in configs.values()):
        return infeasible(opts.mode, diagnose(problem, configs, budget, rate, opts),
                          solve_time_s=time.perf_counter() - t0, rate_qps=rate)

    solver = SOLVERS.get(opts.solver.lower())
    if solver is None:
        raise ValueError(f"solver: expected one of {sorted(SOLVERS)}, got {opts.solver!r}")
    sense = mip.MINIMIZE if objective == "cost" else mip.MAXIMIZE
    m = mip.Model(name=_name(problem.name), sense=sense, solver_name=solver)
    m.verbose = 0
    m.max_seconds = opts.time_limit_s
    lam = {s: problem.stage_rate(s, rate) for s in configs}
    mix = problem.mix if opts.allow_mix is None else opts.allow_mix
    build = _build_mixed if mix else _build_single
    use, rep, flow, cost = build(m, problem, configs, lam, paths, budget, lat, objective)
    for k, ban in enumerate(opts.exclude):
        banned = [use[c] for cs in configs.values() for c in cs if (c.stage, c.variant, c.hardware, c.batch) in ban]
        if len(banned) == len(ban):
            m += mip.xsum(banned) <= len(ban) - 1, _name("runner_up_cut", k)
    if warm is not None and warm.stages:
        m.start = _warm_start(warm, configs, use, rep)
    status = m.optimize(max_seconds=opts.time_limit_s)
    if status not in (mip.OptimizationStatus.OPTIMAL, mip.OptimizationStatus.FEASIBLE):
        reason = diagnose(problem, configs, budget, rate, opts)
        if status != mip.OptimizationStatus.INFEASIBLE:
            reason = f"solver status {status.name}: {reason}"
        return infeasible(opts.mode, reason, solve_time_s=time.perf_counter() - t0, rate_qps=rate,
                          notes=(f"solver {solver}: {status.name}",))
    notes = [f"solver {solver}: {status.name}, objective {m.objective_value:.6g}"]
    x = {v: v.x for v in (*use.values(), *rep.values(), *flow.values()) if isinstance(v, mip.Var)}
    if objective == "cost":
        left = max(opts.time_limit_s - (time.perf_counter() - t0), 1.0)
        x, note = _tie_break(m, cost, configs, lam, use, rep, lat, x, left)
        notes.append(note)
    elapsed = time.perf_counter() - t0

    def val(v: Any) -> float:
        return x[v] if isinstance(v, mip.Var) else float(v)

    stages: dict[str, tuple[Assignment, ...]] = {}
    for s, cs in configs.items():
        chosen = [(c, int(round(val(rep[c])))) for c in cs if val(use[c]) >= 0.5]
        if objective == "cost" or lam[s] <= 0 or not flow:
            caps = [n * c.throughput_qps for c, n in chosen]
            weights = [w / sum(caps) for w in caps]
        else:
            weights = [max(val(flow[c]), 0.0) / lam[s] for c, _ in chosen]
        stages[s] = tuple(assignment_for(c, n, w) for (c, n), w in zip(chosen, weights))
    used_rep = {c: (val(rep[c]) if val(use[c]) >= 0.5 else 0.0) for cs in configs.values() for c in cs}
    notes += binding(problem, configs, stages, lat, budget, lam, paths, used_rep)
    return evaluate(problem, opts.mode, stages, rate_qps=rate, solve_time_s=elapsed, notes=tuple(notes))


def _warm_start(warm: Plan, configs: Mapping[str, list[Config]], use: Mapping[Config, Any],
                rep: Mapping[Config, Any]) -> list:
    start = []
    for sp in warm.stages:
        for a in sp.assignments:
            for c in configs.get(sp.stage, ()):
                if (c.variant, c.hardware, c.batch) == (a.variant, a.hardware, a.max_batch):
                    start.append((use[c], 1.0))
                    if isinstance(rep[c], mip.Var):
                        start.append((rep[c], float(a.replicas)))
    return start


def _tie_break(m: "mip.Model", cost: Any, configs: Mapping[str, list[Config]], lam: Mapping[str, float],
               use: Mapping[Config, Any], rep: Mapping[Config, Any], lat: Callable[[Config], float], x: dict,
               max_seconds: float) -> tuple[dict, str]:
    """The cost objective's tie-break, solved after it with the cost held at the optimum ``x`` found:
    of the cheapest plans, those within :data:`HEADROOM_SLACK` of the most headroom (the tightest
    stage's capacity over its rate), and of those the fastest (least sum of config latencies). Without
    it the solver's order decides: HiGHS and CBC picked different EfficientNet-Lite variants at the
    same price, and a slower variant at the same price makes the tuner buy replicas sooner (runs s17:
    lite2 at the plan's 0.100 $/h ran at 0.130 $/h, lite0 at 0.100). Headroom alone would take a large
    batch for a sliver of capacity and its formation wait. Returns the values and a note; a solve that
    finds nothing leaves the values before it."""
    loaded = [s for s in configs if lam[s] > 0]
    if not loaded:
        return x, "tie-break: none (no stage has traffic)"
    scale = {c: c.throughput_qps / lam[c.stage] for s in loaded for c in configs[s]}  # headroom per replica

    def headroom(c: Config) -> Any:  # in the single build rep is a constant, times use
        return rep[c] * scale[c] if isinstance(rep[c], mip.Var) else use[c] * (rep[c] * scale[c])

    def most(c: Config) -> float:
        return (rep[c].ub if isinstance(rep[c], mip.Var) else rep[c]) * scale[c]

    least = cost.x
    m += cost <= least + 1e-7 * max(1.0, least), "cheapest"
    head = m.add_var("headroom", lb=0.0, ub=min(sum(most(c) for c in configs[s]) for s in loaded))
    for s in loaded:
        m += head <= mip.xsum(headroom(c) for c in configs[s]), _name("headroom", s)
    fewer = TIE * mip.xsum(use.values())
    m.cuts = 0  # CBC's cut rounds took 2.5 s a solve here on the 2,100-config bench, 0.03 s without
    widest = _again(m, mip.maximize(head - fewer), x, max_seconds)
    if widest is None:
        return x, f"tie-break at {least:.6g} $/h: no most-headroom solution, the first solution stands"
    m += head >= (1.0 - HEADROOM_SLACK) * head.x, "near_most_headroom"
    fastest = _again(m, mip.minimize(mip.xsum(lat(c) * use[c] for cs in configs.values() for c in cs) + fewer),
                     widest, max_seconds)
    if fastest is None:
        return widest, f"tie-break at {least:.6g} $/h: the most headroom (no fastest solution)"
    return fastest, (f"tie-break: of the plans at {least:.6g} $/h, the fastest within {HEADROOM_SLACK:.0%} "
                     f"of the most headroom (tightest stage x{head.x:.2f} its rate)")


def _again(m: "mip.Model", objective: Any, x: dict, max_seconds: float) -> dict | None:
    """Re-solve ``m`` for ``objective`` from the solution ``x``: its values, or None if none was found."""
    m.objective = objective
    m.start = list(x.items())
    status = m.optimize(max_seconds=max_seconds)
    if status not in (mip.OptimizationStatus.OPTIMAL, mip.OptimizationStatus.FEASIBLE):
        return None
    return {v: v.x for v in x}


def binding(problem: Problem, configs: Mapping[str, list[Config]], stages: Mapping[str, tuple],
            lat: Callable[[Config], float], budget: float, lam: Mapping[str, float],
            paths: list[tuple[str, ...]], rep: Mapping[Config, float]) -> list[str]:
    """Constraints with no slack at the solution, in words (for --explain)."""
    out = []
    used = {s: max(lat(c) for c in configs[s] if rep[c] >= 0.5) for s in configs}
    for p in paths:
        total = sum(used[s] for s in p)
        if budget - total < 0.02 * budget:
            out.append(f"binding: path {'->'.join(p)} latency {total:.1f} of {budget:.1f} ms")
    for s, cs in configs.items():
        chosen = [c for c in cs if rep[c] >= 0.5]
        cap = sum(rep[c] * c.throughput_qps for c in chosen)
        smallest = min(c.throughput_qps for c in chosen)
        if sum(rep[c] for c in chosen) > len(chosen) and cap - smallest < lam[s]:
            out.append(f"binding: stage {s} capacity {cap:.1f} qps for {lam[s]:.1f} qps "
                       "(one replica fewer would not keep up)")
    if problem.max_replicas is not None:
        total = sum(a.replicas for a_s in stages.values() for a in a_s)
        if total >= problem.max_replicas:
            out.append(f"binding: cluster cap {problem.max_replicas} replicas")
    return out


def _objective(m: "mip.Model", problem: Problem, configs: Mapping[str, list[Config]],
               lam: Mapping[str, float], paths: list, objective: str, cost: Any, ties: Any,
               acc_terms: Mapping[str, Any]) -> None:
    if objective == "cost":
        m.objective = cost + ties
        return
    acc = mip.xsum(acc_terms[s] for p in paths for s in p if s in acc_terms) * (1.0 / len(paths))
    if objective == "accuracy":
        m.objective = problem.accuracy_weight * acc - cost - ties
    else:  # max-accuracy (Loki step 2): all servers may be used; cost only breaks ties
        m.objective = acc - 1e-4 * cost - ties


def _floor(m: "mip.Model", problem: Problem, configs: Mapping[str, list[Config]], paths: list,
           use: Mapping[Config, Any]) -> None:
    floor = problem.accuracy_floor
    if not floor:
        return
    big = -math.log(min(c.accuracy for cs in configs.values() for c in cs)) + 1.0
    minlog = {s: m.add_var(_name("minlog", s), lb=-big, ub=0.0) for s in configs}
    for s, cs in configs.items():
        for i, c in enumerate(cs):
            m += minlog[s] <= math.log(c.accuracy) + big * (1 - use[c]), _name("floor_ge", s, i)
    for k, p in enumerate(paths):
        m += mip.xsum(minlog[s] for s in p) >= math.log(floor), _name("accuracy_floor", k)


def _build_single(m: "mip.Model", problem: Problem, configs: Mapping[str, list[Config]],
                  lam: Mapping[str, float], paths: list, budget: float,
                  lat: Callable[[Config], float], objective: str):
    """One config per stage (IPA's exact linearisation): replicas are fixed at ceil(lambda / mu)
    for the chosen config, which is optimal for every objective here, so only binaries remain."""
    use: dict[Config, Any] = {}
    rep: dict[Config, int] = {}
    cap = problem.max_stage_replicas
    for s, cs in configs.items():
        for i, c in enumerate(cs):
            use[c] = m.add_var(_name("use", s, c.variant, c.hardware, "b", c.batch, i), var_type=mip.BINARY)
            rep[c] = c.replicas_for(lam[s])
            if cap is not None and rep[c] > cap:
                m += use[c] == 0, _name("stage_cap", s, i)
        m += mip.xsum(use[c] for c in cs) == 1, _name("one_config", s)
    for k, p in enumerate(paths):
        m += mip.xsum(lat(c) * use[c] for s in p for c in configs[s]) <= budget, _name("path_latency", k)
    if problem.max_replicas is not None:
        m += mip.xsum(rep[c] * use[c] for c in use) <= problem.max_replicas, "cluster_cap"
    _floor(m, problem, configs, paths, use)
    cost = mip.xsum(rep[c] * c.price * use[c] for c in use)
    acc_terms = {s: mip.xsum(math.log(max(c.accuracy, 1e-9)) * use[c] for c in cs) for s, cs in configs.items()}
    _objective(m, problem, configs, lam, paths, objective, cost, 0, acc_terms)
    return use, rep, {}, cost


def _build_mixed(m: "mip.Model", problem: Problem, configs: Mapping[str, list[Config]],
                 lam: Mapping[str, float], paths: list, budget: float,
                 lat: Callable[[Config], float], objective: str):
    """Several configs per stage: integer replicas per config and (for accuracy) traffic shares."""
    use: dict[Config, mip.Var] = {}
    rep: dict[Config, mip.Var] = {}
    flow: dict[Config, mip.Var] = {}
    lat_s: dict[str, mip.Var] = {}
    for s, cs in configs.items():
        lat_s[s] = m.add_var(_name("lat", s), lb=0.0)
        for i, c in enumerate(cs):
            key = _name(s, c.variant, c.hardware, "b", c.batch, i)
            cap = min(c.replicas_for(lam[s]), problem.stage_cap() or math.inf)
            use[c] = m.add_var(_name("use", key), var_type=mip.BINARY)
            rep[c] = m.add_var(_name("rep", key), var_type=mip.INTEGER, lb=0, ub=cap)
            m += rep[c] >= use[c], _name("rep_min", key)
            m += rep[c] <= cap * use[c], _name("rep_max", key)
            m += lat_s[s] >= lat(c) * use[c], _name("lat_ge", key)
            if objective != "cost":
                flow[c] = m.add_var(_name("flow", key), lb=0.0)
                m += flow[c] <= c.throughput_qps * rep[c], _name("flow_cap", key)
                m += flow[c] <= lam[s] * use[c], _name("flow_use", key)
        m += mip.xsum(use[c] for c in cs) >= 1, _name("one_config", s)
        m += mip.xsum(rep[c] * c.throughput_qps for c in cs) >= lam[s], _name("capacity", s)
        if problem.max_stage_replicas is not None:
            m += mip.xsum(rep[c] for c in cs) <= problem.max_stage_replicas, _name("stage_cap", s)
        if objective != "cost":
            m += mip.xsum(flow[c] for c in cs) == lam[s], _name("route_all", s)
    for k, p in enumerate(paths):
        m += mip.xsum(lat_s[s] for s in p) <= budget, _name("path_latency", k)
    if problem.max_replicas is not None:
        m += mip.xsum(rep.values()) <= problem.max_replicas, "cluster_cap"
    _floor(m, problem, configs, paths, use)
    cost = mip.xsum(rep[c] * c.price for c in rep)
    acc_terms = {s: mip.xsum(flow[c] * (math.log(max(c.accuracy, 1e-9)) / lam[s]) for c in configs[s])
                 for s in configs if lam[s] > 0 and objective != "cost"}
    _objective(m, problem, configs, lam, paths, objective, cost, TIE * mip.xsum(use.values()), acc_terms)
    return use, rep, flow, cost


def chosen_set(plan: Plan) -> frozenset:
    return frozenset((sp.stage, a.variant, a.hardware, a.max_batch) for sp in plan.stages for a in sp.assignments)


def runner_up(problem: Problem, plan: Plan, opts: MilpOptions = MilpOptions()) -> Plan:
    """The best plan that does not reuse exactly the configs of ``plan`` (for --explain)."""
    rate = plan.rate_qps or problem.rate_qps
    budget = plan.rounds[-1].budget_ms if plan.rounds else opts.budget_ms
    return solve(problem, replace(opts, rate_qps=rate, budget_ms=budget, exclude=opts.exclude + (chosen_set(plan),)))
