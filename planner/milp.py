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
- host (``slipstream.planner.cores``): the replicas' busy cores ``sum_s lambda_s x cpu_c / 1000`` (CPU ms per
  item, at the stage's used config; its ``flow`` share with traffic shares) within the cores the
  co-located processes leave, both at the problem's rate: a tightening round's higher planning rate
  buys capacity, not arrivals
- objectives: ``cost`` = min sum rep x price, its ties broken in the same solve by lexicographic
  weights: then the most headroom ``h`` (``h <= capacity_s / lambda_s`` for every stage, each stage
  counted up to 90 % of the most its configs of the same stage cost give, so a config within 10 %
  of that ties with it), then the fastest (least sum of config latencies); ``accuracy`` = max weight
  x expected log pipeline
  accuracy - cost, where traffic shares ``flow[c] <= rep[c] * mu_c`` route the stage's items and the
  expected log accuracy of a path is sum over its stages of sum_c flow[c] / lambda_s x log a_c
  (= log of the product of accuracies for single-config stages; IPA sums accuracies instead);
  ``max-accuracy`` (Loki step 2) = the accuracy term alone with a tiny cost tie-breaker.
"""
from __future__ import annotations

import functools
import importlib
import math
import re
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Mapping

try:
    import mip
except ImportError as exc:  # the extra `planner`: worker installs leave the solver out
    raise ImportError("the MILP planner needs python-mip: pip install 'slipstream[planner]'") from exc

from .plan import Assignment, Config, Plan, assignment_for, evaluate, infeasible, stage_configs
from .problem import Problem


def _bind_destructors() -> None:
    """python-mip's solvers free their model in ``__del__`` through a cffi function that cffi looks
    up on its first use, under a lock it does not re-enter. A garbage collection during another
    first lookup that frees a model then waits on that lock forever (the unit suite hung so in
    ``SolverHighs.__del__``). Looking the destructors up here, once, leaves ``__del__`` no lookup."""
    for module, lib, names in (("mip.highs", "highslib", ("Highs_destroy",)),
                               ("mip.cbc", "cbclib", ("Cbc_deleteModel", "Osi_deleteSolver"))):
        try:
            handle = getattr(importlib.import_module(module), lib)
            for name in names:
                getattr(handle, name)
        except Exception:  # noqa: BLE001 - a solver library that is not there frees nothing
            pass


_bind_destructors()
SOLVERS = {"highs": "HIGHS", "cbc": "CBC"}
TIE = 1e-6  # tie-breaker weight: fewer configs per stage
HEADROOM_SLACK = 0.1  # the cost objective's tie-break: within this of the most headroom, the fastest
# the cost objective's weights (``_lexicographic``): a cost difference of COST_STEP of the cheapest
# conceivable plan outweighs any headroom and latency, a headroom difference of HEAD_STEP of the
# most any latency; the solve stops within GAP_MS of the best sum of latencies
COST_STEP = 1e-4
HEAD_STEP = 0.01
GAP_MS = 0.05


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
    return "_".join(map(_word, parts))


@functools.lru_cache(maxsize=4096)
def _word(part: object) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", str(part))


def diagnose(problem: Problem, configs: Mapping[str, list[Config]], budget: float, rate: float,
             opts: MilpOptions) -> str:
    """Why a problem has no solution, in words (checked in order of the usual culprits)."""
    def lat(c: Config) -> float:
        return c.exec_ms if opts.latency_model == "loki" else c.latency_ms
    wide = [s for s in configs if not any(problem.curves_on_host(s, v.name) for v in problem.stage(s).variants)]
    if wide:
        return f"no hardware of stage(s) {wide} has few enough threads for the host's {problem.host.cores:g} cores"
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
    if problem.host is not None:
        others = problem.colocated_cores()
        least = sum(problem.stage_rate(s) * min(c.cpu_ms_per_item for c in cs) / 1000.0 for s, cs in configs.items())
        if least + others > problem.host.cores:
            return (f"host: at {problem.rate_qps:.1f} qps the co-located processes keep {others:.2f} cores busy "
                    f"and the replicas at least {least:.2f}, more than the host's {problem.host.cores:g}")
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
    room = math.inf if problem.host is None else problem.host.cores - problem.colocated_cores()
    if any(not cs for cs in configs.values()) or room <= 0:
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
    lats = {s: [lat(c) for c in cs] for s, cs in configs.items()}
    v = (_build_mixed if mix else _build_single)(m, problem, configs, lam, paths, budget, lats, objective, room)
    for k, ban in enumerate(opts.exclude):
        banned = [u for s, cs in configs.items() for c, u in zip(cs, v.use[s])
                  if (c.stage, c.variant, c.hardware, c.batch) in ban]
        if len(banned) == len(ban):
            m += _lin((u, 1.0) for u in banned) <= len(ban) - 1, _name("runner_up_cut", k)
    head = _lexicographic(m, configs, lam, v, lats) if objective == "cost" else None
    if not mix:  # CBC's cut rounds took 0.45 of its 0.55 s on the 2,100-config bench (a mixed problem
        m.cuts = 0  # ran into the time limit without them)
    if warm is not None and warm.stages:
        m.start = _warm_start(warm, configs, v)
    status = m.optimize(max_seconds=opts.time_limit_s)
    if status not in (mip.OptimizationStatus.OPTIMAL, mip.OptimizationStatus.FEASIBLE):
        reason = diagnose(problem, configs, budget, rate, opts)
        if status != mip.OptimizationStatus.INFEASIBLE:
            reason = f"solver status {status.name}: {reason}"
        return infeasible(opts.mode, reason, solve_time_s=time.perf_counter() - t0, rate_qps=rate,
                          notes=(f"solver {solver}: {status.name}",))

    def val(x: Any) -> float:
        return x.x if isinstance(x, mip.Var) else float(x)

    used_rep = {s: [val(r) if u.x >= 0.5 else 0.0 for u, r in zip(v.use[s], v.rep[s])] for s in configs}
    elapsed = time.perf_counter() - t0
    value = m.objective_value if objective != "cost" else \
        sum(n * c.price for s, cs in configs.items() for c, n in zip(cs, used_rep[s]))
    notes = [f"solver {solver}: {status.name}, objective {value:.6g}"]
    if objective == "cost":
        notes.append("tie-break: none (no stage has traffic)" if head is None else
                     f"tie-break: of the plans at {value:.6g} $/h, the most headroom (tightest stage x{head.x:.2f} "
                     f"its rate, {HEADROOM_SLACK:.0%} less a tie), then the fastest")
    stages: dict[str, tuple[Assignment, ...]] = {}
    for s, cs in configs.items():
        chosen = [(c, int(round(n)), i) for i, (c, n) in enumerate(zip(cs, used_rep[s])) if n >= 0.5]
        if objective == "cost" or lam[s] <= 0 or not v.flow:
            caps = [n * c.throughput_qps for c, n, _ in chosen]
            weights = [w / sum(caps) for w in caps]
        else:
            weights = [max(v.flow[s][i].x, 0.0) / lam[s] for _, _, i in chosen]
        stages[s] = tuple(assignment_for(c, n, w) for (c, n, _), w in zip(chosen, weights))
    notes += binding(problem, configs, stages, lat, budget, lam, paths, used_rep)
    return evaluate(problem, opts.mode, stages, rate_qps=rate, solve_time_s=elapsed, notes=tuple(notes))


def _lin(terms: Iterable[tuple[Any, float]], const: float = 0.0) -> "mip.LinExpr":
    """sum of coefficient x variable over distinct variables, built at once (``xsum`` makes an
    expression per term)."""
    return mip.LinExpr(expr=dict(terms), const=const)


def _merged(terms: Iterable[tuple[Any, float]], const: float = 0.0) -> "mip.LinExpr":
    """:func:`_lin` where a variable may come more than once (its coefficients add up)."""
    expr: dict = {}
    for var, coef in terms:
        expr[var] = expr.get(var, 0.0) + coef
    return mip.LinExpr(expr=expr, const=const)


@dataclass(frozen=True)
class _Vars:
    """A build's variables, per stage in the order of its configs (``rep``: a variable, or in the
    single build the fixed replica count), and its cost expression."""

    use: dict[str, list[Any]]
    rep: dict[str, list[Any]]
    flow: dict[str, list[Any]]
    cost: Any
    ties: Any  # fewer configs per stage (the mixed build's TIE), or 0


def _warm_start(warm: Plan, configs: Mapping[str, list[Config]], v: _Vars) -> list:
    start = []
    for sp in warm.stages:
        for a in sp.assignments:
            for c, u, r in zip(configs.get(sp.stage, ()), v.use.get(sp.stage, ()), v.rep.get(sp.stage, ())):
                if (c.variant, c.hardware, c.batch) == (a.variant, a.hardware, a.max_batch):
                    start.append((u, 1.0))
                    if isinstance(r, mip.Var):
                        start.append((r, float(a.replicas)))
    return start


def _lexicographic(m: "mip.Model", configs: Mapping[str, list[Config]], lam: Mapping[str, float], v: _Vars,
                   lats: Mapping[str, list[float]]) -> Any:
    """The cost objective with its tie-break, for one solve: cost first, then the most headroom ``h``
    (capped, so that headroom within :data:`HEADROOM_SLACK` of the most ties), then the fastest (least
    sum of config latencies), by weights each of which outweighs everything after it.

    A stage's headroom counts up to a cap: (1 - slack) x the most headroom of its configs at the same
    stage cost (at their fewest replicas), and no more than (1 - slack) x the least over stages of the
    most their cheapest configs give (the plan's headroom is its tightest stage's). Re-solving with
    the cost fixed, then the headroom, found the same plans on the unit tests at three solves' cost;
    the caps stand in for the second solve's "most headroom". Returns the headroom variable (None
    when no stage has traffic: the cost alone)."""
    loaded = [s for s in configs if lam[s] > 0]
    if not loaded:
        m.objective = v.cost + v.ties
        return None
    keep = 1.0 - HEADROOM_SLACK
    per_replica, caps, cheapest, least = {}, {}, [], 0.0
    for s in loaded:
        per_replica[s] = [c.throughput_qps / lam[s] for c in configs[s]]
        fewest = [c.replicas_for(lam[s]) for c in configs[s]]
        price = [round(n * c.price, 9) for n, c in zip(fewest, configs[s])]  # the stage's cost
        most: dict[float, float] = {}
        for n, p, h in zip(fewest, price, per_replica[s]):
            most[p] = max(most.get(p, 0.0), n * h)
        caps[s] = [keep * most[p] for p in price]
        cheapest.append(most[min(most)])
        least += min(price)
    bound = keep * min(cheapest)
    caps = {s: [min(x, bound) for x in caps[s]] for s in loaded}
    top = min(max(caps[s]) for s in loaded)
    head = m.add_var("headroom", lb=0.0, ub=top)
    for s in loaded:
        if all(isinstance(r, int) for r in v.rep[s]):  # one config, fixed replicas: one row, capped
            m += _lin([(head, 1.0)] + [(u, -min(r * h, cap)) for u, r, h, cap in
                                       zip(v.use[s], v.rep[s], per_replica[s], caps[s])]) <= 0, _name("headroom", s)
            continue
        m += _lin([(head, 1.0)] + [(r, -h) for r, h in zip(v.rep[s], per_replica[s])]) <= 0, _name("headroom", s)
        m += _lin([(head, 1.0)] + [(u, -cap) for u, cap in zip(v.use[s], caps[s])]) <= 0, _name("headroom_cap", s)
    slowest = max(sum(max(ls) for ls in lats.values()), 1.0)
    least = max(least, 1e-3)  # the cheapest conceivable plan (stages without traffic aside)
    head_w = slowest / HEAD_STEP  # HEAD_STEP x top of headroom outweighs any latency (ms)
    cost_w = 2.0 * (head_w + slowest) / (COST_STEP * least)  # COST_STEP x least of cost outweighs both
    first = v.cost + v.ties
    terms = [(x, cost_w * a) for x, a in first.expr.items()] + [(head, -head_w / top)]
    terms += [(u, x) for s in configs for u, x in zip(v.use[s], lats[s])]
    m.objective = _merged(terms, cost_w * first.const + head_w)
    m.max_mip_gap = 0.0
    m.max_mip_gap_abs = GAP_MS
    return head


def binding(problem: Problem, configs: Mapping[str, list[Config]], stages: Mapping[str, tuple],
            lat: Callable[[Config], float], budget: float, lam: Mapping[str, float],
            paths: list[tuple[str, ...]], rep: Mapping[str, list[float]]) -> list[str]:
    """Constraints with no slack at the solution, in words (for --explain); ``rep``: per stage, each
    config's replicas (0: unused)."""
    out = []
    used = {s: max(lat(c) for c, n in zip(cs, rep[s]) if n >= 0.5) for s, cs in configs.items()}
    for p in paths:
        total = sum(used[s] for s in p)
        if budget - total < 0.02 * budget:
            out.append(f"binding: path {'->'.join(p)} latency {total:.1f} of {budget:.1f} ms")
    for s, cs in configs.items():
        chosen = [(c, n) for c, n in zip(cs, rep[s]) if n >= 0.5]
        cap = sum(n * c.throughput_qps for c, n in chosen)
        smallest = min(c.throughput_qps for c, _ in chosen)
        if sum(n for _, n in chosen) > len(chosen) and cap - smallest < lam[s]:
            out.append(f"binding: stage {s} capacity {cap:.1f} qps for {lam[s]:.1f} qps "
                       "(one replica fewer would not keep up)")
    if problem.max_replicas is not None:
        total = sum(a.replicas for a_s in stages.values() for a in a_s)
        if total >= problem.max_replicas:
            out.append(f"binding: cluster cap {problem.max_replicas} replicas")
    if problem.host is not None:
        busy = sum(problem.stage_rate(s) * c.cpu_ms_per_item / 1000.0 for s, cs in configs.items()
                   for c, n in zip(cs, rep[s]) if n >= 0.5)
        room = problem.host.cores - problem.colocated_cores()
        if room - busy < 0.05 * problem.host.cores:
            out.append(f"binding: host cores, the replicas keep {busy:.2f} of the {room:.2f} the co-located "
                       "processes leave busy")
    return out


def _objective(m: "mip.Model", problem: Problem, paths: list, objective: str, v: _Vars,
               acc_terms: Mapping[str, list[tuple[Any, float]]]) -> None:
    if objective == "cost":
        return  # with its tie-break: _lexicographic
    acc = _merged((x, a / len(paths)) for p in paths for s in p for x, a in acc_terms.get(s, ()))
    if objective == "accuracy":
        m.objective = problem.accuracy_weight * acc - v.cost - v.ties
    else:  # max-accuracy (Loki step 2): all servers may be used; cost only breaks ties
        m.objective = acc - 1e-4 * v.cost - v.ties


def _floor(m: "mip.Model", problem: Problem, configs: Mapping[str, list[Config]], paths: list,
           use: Mapping[str, list[Any]]) -> None:
    floor = problem.accuracy_floor
    if not floor:
        return
    big = -math.log(min(c.accuracy for cs in configs.values() for c in cs)) + 1.0
    minlog = {s: m.add_var(_name("minlog", s), lb=-big, ub=0.0) for s in configs}
    for s, cs in configs.items():
        for i, (c, u) in enumerate(zip(cs, use[s])):
            m += minlog[s] <= math.log(c.accuracy) + big * (1 - u), _name("floor_ge", s, i)
    for k, p in enumerate(paths):
        m += _lin((minlog[s], 1.0) for s in p) >= math.log(floor), _name("accuracy_floor", k)


def _build_single(m: "mip.Model", problem: Problem, configs: Mapping[str, list[Config]],
                  lam: Mapping[str, float], paths: list, budget: float,
                  lats: Mapping[str, list[float]], objective: str, room: float) -> _Vars:
    """One config per stage (IPA's exact linearisation): replicas are fixed at ceil(lambda / mu)
    for the chosen config, which is optimal for every objective here, so only binaries remain."""
    use: dict[str, list[Any]] = {}
    rep: dict[str, list[int]] = {}
    cap = problem.max_stage_replicas
    for s, cs in configs.items():
        rep[s] = [c.replicas_for(lam[s]) for c in cs]
        use[s] = [m.add_var(_name("use", s, c.variant, c.hardware, "b", c.batch, i), var_type=mip.BINARY,
                            ub=0.0 if cap is not None and n > cap else 1.0)  # the stage cap
                  for i, (c, n) in enumerate(zip(cs, rep[s]))]
        m += _lin((u, 1.0) for u in use[s]) == 1, _name("one_config", s)
    for k, p in enumerate(paths):
        m += _lin((u, x) for s in p for u, x in zip(use[s], lats[s])) <= budget, _name("path_latency", k)
    if problem.max_replicas is not None:
        m += _lin((u, n) for s in configs for u, n in zip(use[s], rep[s])) <= problem.max_replicas, "cluster_cap"
    if math.isfinite(room):  # the host: the replicas' busy cores at the problem's rate
        busy = {s: problem.stage_rate(s) / 1000.0 for s in configs}
        m += _lin((u, busy[s] * c.cpu_ms_per_item) for s, cs in configs.items()
                  for c, u in zip(cs, use[s])) <= room, "host_cores"
    _floor(m, problem, configs, paths, use)
    v = _Vars(use, rep, {}, _lin((u, n * c.price) for s, cs in configs.items()
                                   for c, u, n in zip(cs, use[s], rep[s])), 0)
    acc = {} if objective == "cost" else {s: [(u, math.log(max(c.accuracy, 1e-9))) for c, u in zip(cs, use[s])]
                                          for s, cs in configs.items()}
    _objective(m, problem, paths, objective, v, acc)
    return v


def _build_mixed(m: "mip.Model", problem: Problem, configs: Mapping[str, list[Config]],
                 lam: Mapping[str, float], paths: list, budget: float,
                 lats: Mapping[str, list[float]], objective: str, room: float) -> _Vars:
    """Several configs per stage: integer replicas per config and (for accuracy) traffic shares. On a
    host a stage's busy cores are bounded by its items at its most CPU-hungry used config's cost,
    or, with traffic shares, each config's share at its own."""
    use: dict[str, list[Any]] = {}
    rep: dict[str, list[Any]] = {}
    flow: dict[str, list[Any]] = {}
    lat_of: dict[str, Any] = {}
    cpu: list[tuple[Any, float]] = []
    on_host = math.isfinite(room)
    for s, cs in configs.items():
        lat_s = lat_of[s] = m.add_var(_name("lat", s), lb=0.0)
        busy = problem.stage_rate(s) / 1000.0  # the stage's items a ms, at the problem's rate
        cpu_s = m.add_var(_name("cpu", s), lb=0.0) if on_host and objective == "cost" else None
        use[s], rep[s], flow[s] = [], [], []
        for i, c in enumerate(cs):
            key = _name(s, c.variant, c.hardware, "b", c.batch, i)
            cap = min(c.replicas_for(lam[s]), problem.stage_cap() or math.inf)
            u = m.add_var(_name("use", key), var_type=mip.BINARY)
            r = m.add_var(_name("rep", key), var_type=mip.INTEGER, lb=0, ub=cap)
            use[s].append(u)
            rep[s].append(r)
            m += r >= u, _name("rep_min", key)
            m += r <= cap * u, _name("rep_max", key)
            m += lat_s >= lats[s][i] * u, _name("lat_ge", key)
            if cpu_s is not None:
                m += cpu_s >= busy * c.cpu_ms_per_item * u, _name("cpu_ge", key)
            if objective != "cost":
                f = m.add_var(_name("flow", key), lb=0.0)
                flow[s].append(f)
                m += f <= c.throughput_qps * r, _name("flow_cap", key)
                m += f <= lam[s] * u, _name("flow_use", key)
                if on_host and lam[s] > 0:  # its share of the stage's items, at the problem's rate
                    cpu.append((f, busy * c.cpu_ms_per_item / lam[s]))
        if cpu_s is not None:
            cpu.append((cpu_s, 1.0))
        m += _lin((u, 1.0) for u in use[s]) >= 1, _name("one_config", s)
        m += _lin((r, c.throughput_qps) for c, r in zip(cs, rep[s])) >= lam[s], _name("capacity", s)
        if problem.max_stage_replicas is not None:
            m += _lin((r, 1.0) for r in rep[s]) <= problem.max_stage_replicas, _name("stage_cap", s)
        if objective != "cost":
            m += _lin((f, 1.0) for f in flow[s]) == lam[s], _name("route_all", s)
    for k, p in enumerate(paths):
        m += _lin((lat_of[s], 1.0) for s in p) <= budget, _name("path_latency", k)
    if problem.max_replicas is not None:
        m += _lin((r, 1.0) for s in configs for r in rep[s]) <= problem.max_replicas, "cluster_cap"
    if on_host:
        m += _lin(cpu) <= room, "host_cores"
    _floor(m, problem, configs, paths, use)
    v = _Vars(use, rep, flow if objective != "cost" else {},
              _lin((r, c.price) for s, cs in configs.items() for c, r in zip(cs, rep[s])),
              _lin((u, TIE) for s in configs for u in use[s]))
    acc = {s: [(f, math.log(max(c.accuracy, 1e-9)) / lam[s]) for c, f in zip(configs[s], flow[s])]
           for s in configs if lam[s] > 0 and objective != "cost"}
    _objective(m, problem, paths, objective, v, acc)
    return v


def chosen_set(plan: Plan) -> frozenset:
    return frozenset((sp.stage, a.variant, a.hardware, a.max_batch) for sp in plan.stages for a in sp.assignments)


def runner_up(problem: Problem, plan: Plan, opts: MilpOptions = MilpOptions()) -> Plan:
    """The best plan that does not reuse exactly the configs of ``plan`` (for --explain)."""
    rate = plan.rate_qps or problem.rate_qps
    budget = plan.rounds[-1].budget_ms if plan.rounds else opts.budget_ms
    return solve(problem, replace(opts, rate_qps=rate, budget_ms=budget, exclude=opts.exclude + (chosen_set(plan),)))
