"""InferLine's planner: greedy cost minimisation with the estimator as the feasibility check.

Algorithm 1 (Initialize) and Algorithm 2 (MinimizeCost) of the paper, per stage (hardware, max
batch, replicas), with the stage's most accurate variant (InferLine does not choose variants):

- Initialize: batch 1 on the lowest-latency hardware; infeasible if the longest path's batch-1
  service time reaches the SLO; then add a replica to the throughput bottleneck
  (argmin replicas x mu / lambda_s) until the estimator says the plan meets the SLO at p99.
  Shortcut (same result, fewer simulations): replicas start at ceil(lambda_s / mu), since fewer
  replicas than that cannot keep up and the estimator would reject them anyway.
- MinimizeCost: repeatedly apply the cheapest feasible single action among IncreaseBatch (double),
  RemoveReplica and DowngradeHW (re-initialise the stage on the next cheaper hardware, then a local
  batch/replica search on that stage alone; accepted only if cheaper), until none is feasible.

Feasible = within the host's cores (``slipstream.planner.cores.host_excess``, checked first) and the estimator's
attainment on the sample trace >= 99 % (p99 <= SLO, drops count as misses).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

from .cores import host_excess
from .estimator import simulate
from .plan import Assignment, Plan, evaluate, formation_ms, infeasible
from .problem import Problem

Cfg = tuple[tuple[str, str, int, int], ...]  # per stage in topo order: (variant, hw, batch, replicas)


@dataclass(frozen=True)
class InferLineOptions:
    percentile: float = 99.0
    max_simulations: int = 400
    mode: str = "inferline"


def top_variant(problem: Problem, stage: str) -> str:
    return max(problem.stage(stage).variants, key=lambda v: v.accuracy).name


class _Search:
    def __init__(self, problem: Problem, opts: InferLineOptions) -> None:
        self.p = problem
        self.opts = opts
        self.names = problem.topo_order
        self.cache: dict[Cfg, bool] = {}
        self.sims = 0

    def curve(self, stage: str, variant: str, hw: str):
        return self.p.stage(stage).variant(variant).latency[hw]

    def assignments(self, cfg: Cfg) -> dict[str, tuple[Assignment, ...]]:
        out = {}
        for s, (v, h, b, n) in zip(self.names, cfg):
            exec_ms = self.curve(s, v, h).ms(b)
            timeout = min(formation_ms(b, self.p.stage_rate(s)), exec_ms)
            out[s] = (Assignment(v, h, b, n, 1.0, timeout),)
        return out

    def plan(self, cfg: Cfg, **kw) -> Plan:
        return evaluate(self.p, self.opts.mode, self.assignments(cfg), **kw)

    def cost(self, cfg: Cfg) -> float:
        return sum(n * self.p.hardware[h].cost_per_hour for _, h, _, n in cfg)

    def feasible(self, cfg: Cfg) -> bool:
        if self.p.max_replicas is not None and sum(c[3] for c in cfg) > self.p.max_replicas:
            return False  # beyond the cluster cap, whatever the estimator says
        if self.p.max_stage_replicas is not None and max(c[3] for c in cfg) > self.p.max_stage_replicas:
            return False  # beyond the per-stage cap
        if cfg not in self.cache:
            if host_excess(self.p, self.plan(cfg)):
                self.cache[cfg] = False  # more than the host's cores: no simulation needed
                return False
            if self.sims >= self.opts.max_simulations:
                return False
            self.sims += 1
            res = simulate(self.p, self.plan(cfg))
            self.cache[cfg] = res.meets_slo(self.opts.percentile)
        return self.cache[cfg]

    def mu(self, s: str, v: str, h: str, b: int) -> float:
        return self.curve(s, v, h).throughput_qps(b)

    def min_replicas(self, s: str, v: str, h: str, b: int) -> int:
        return max(1, math.ceil(self.p.stage_rate(s) / self.mu(s, v, h, b) - 1e-9))

    def batches(self, s: str, v: str, h: str) -> tuple[int, ...]:
        return self.p.batch_sizes_for(self.curve(s, v, h))

    def replace(self, cfg: Cfg, i: int, item: tuple[str, str, int, int]) -> Cfg:
        return cfg[:i] + (item,) + cfg[i + 1:]

    def add_to_bottleneck(self, cfg: Cfg, only: int | None = None) -> Cfg | None:
        """Add replicas to the bottleneck until feasible; None when the cap or budget runs out."""
        limit = self.p.max_replicas or 10_000
        while not self.feasible(cfg):
            if self.sims >= self.opts.max_simulations or sum(c[3] for c in cfg) >= limit:
                return None
            top = self.p.max_stage_replicas or limit
            cand = [i for i in (range(len(cfg)) if only is None else (only,)) if cfg[i][3] < top]
            if not cand:
                return None

            def headroom(i: int) -> float:
                v, h, b, n = cfg[i]
                lam = self.p.stage_rate(self.names[i])
                return n * self.mu(self.names[i], v, h, b) / lam if lam > 0 else math.inf
            i = min(cand, key=headroom)
            v, h, b, n = cfg[i]
            cfg = self.replace(cfg, i, (v, h, b, n + 1))
        return cfg

    def actions(self, cfg: Cfg, stages: range | tuple[int, ...]) -> list[Cfg]:
        out = []
        for i in stages:
            s = self.names[i]
            v, h, b, n = cfg[i]
            bigger = [x for x in self.batches(s, v, h) if x > b]
            if bigger:
                nb = min([x for x in bigger if x >= 2 * b] or [max(bigger)])
                out.append(self.replace(cfg, i, (v, h, nb, n)))
            if n > 1:
                out.append(self.replace(cfg, i, (v, h, b, n - 1)))
        return out

    def local_min(self, cfg: Cfg, stages: range | tuple[int, ...]) -> Cfg:
        while True:
            best = None
            for cand in sorted(self.actions(cfg, stages), key=self.cost):
                if self.feasible(cand):
                    best = cand
                    break
            if best is None:
                return cfg
            cfg = best

    def downgrade(self, cfg: Cfg, i: int) -> Cfg | None:
        s = self.names[i]
        v, h, b, n = cfg[i]
        price = self.p.hardware[h].cost_per_hour
        cheaper = [x for x in self.p.curves_on_host(s, v) if self.p.hardware[x].cost_per_hour < price]
        if not cheaper:
            return None
        h2 = max(cheaper, key=lambda x: self.p.hardware[x].cost_per_hour)
        start = self.replace(cfg, i, (v, h2, 1, self.min_replicas(s, v, h2, 1)))
        ok = self.add_to_bottleneck(start, only=i)
        if ok is None:
            return None
        ok = self.local_min(ok, (i,))
        return ok if self.cost(ok) < self.cost(cfg) else None


def plan_inferline(problem: Problem, opts: InferLineOptions = InferLineOptions()) -> Plan:
    t0 = time.perf_counter()
    srch = _Search(problem, opts)
    cfg_list = []
    for s in srch.names:
        v = top_variant(problem, s)
        curves = problem.curves_on_host(s, v)
        if not curves:
            return infeasible(opts.mode, f"stage {s}: no hardware of {v} fits the host's cores",
                              solve_time_s=time.perf_counter() - t0)
        h = min(curves, key=lambda x: (curves[x].ms(1), problem.hardware[x].cost_per_hour))
        cfg_list.append((v, h, 1, srch.min_replicas(s, v, h, 1)))
    cfg: Cfg = tuple(cfg_list)
    service = max(sum(srch.curve(s, *cfg[srch.names.index(s)][:2]).ms(1) for s in p) for p in problem.paths())
    if service >= problem.slo_ms:
        return infeasible(opts.mode, f"batch-1 service time of the longest path {service:.1f} ms >= SLO "
                          f"{problem.slo_ms:.0f} ms on the fastest hardware", solve_time_s=time.perf_counter() - t0)
    init = srch.add_to_bottleneck(cfg)
    if init is None:
        return infeasible(opts.mode, "no replica count meets the SLO in simulation "
                          f"(within max_replicas={problem.max_replicas} and {opts.max_simulations} simulations)",
                          solve_time_s=time.perf_counter() - t0)
    cfg = init
    while True:
        cands = srch.actions(cfg, range(len(cfg)))
        for i in range(len(cfg)):
            d = srch.downgrade(cfg, i)
            if d is not None:
                cands.append(d)
        best = None
        for cand in sorted(cands, key=srch.cost):
            if srch.feasible(cand):
                best = cand
                break
        if best is None:
            break
        cfg = best
    notes = (f"{srch.sims} simulations", f"initial cost {srch.cost(init):.3f} $/h")
    return srch.plan(cfg, solve_time_s=time.perf_counter() - t0, notes=notes)
