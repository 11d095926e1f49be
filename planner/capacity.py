"""What a plan can serve: per stage, the rate its replicas keep up with and, per window, the most
arrivals within that window they serve within the stage's share of the SLO (docs/tuner.md, "What the
plan can serve").

The tuner scales on these numbers (the planner hands them over in the ``TunerHandoff`` record), and
a plan that meets no SLO is described by them (``capacity_qps``, ``planner.fallback``). They come
from the model the estimator runs: the stage's latency curve (``streams.latency``) at the deployed
batch size and the batching rule's service curve (``streams.batching.served_within``). A stage runs
as deployed (``planner.service.stage_configs``): all its replicas with the primary assignment's
variant, hardware, max batch and batch timeout.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from planner.plan import Plan, config_of
from planner.problem import Problem
from planner.sim.params import Network, Transit
from streams.batching import served_within

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class StageCapacity:
    """One stage's capacity in pipeline requests per second (items / visit ratio)."""

    stage: str
    budget_ms: float  # the stage's share of the SLO
    rate_qps: float  # what its planned replicas keep up with, back to back at the planned batch
    window_qps: tuple[float, ...]  # per window w_i: the most arrivals in w_i served within budget, / w_i;
    # empty when the stage cannot serve a lone item within its budget (no delay bound at any rate)
    variant: str = ""  # the primary assignment's, which the numbers are for
    service_ms: tuple[float, ...] = ()  # l(b) for b = 1..max batch: what the numbers assume a batch takes


def path_transit_ms(problem: Problem, path: Sequence[str]) -> float:
    """Mean Kafka transit along a path: in, between its stages, out to the results topic."""
    net = problem.network or Network.every_hop(Transit.constant(problem.hop_ms))
    return net.ingress.mean_ms + (len(path) - 1) * net.between.mean_ms + net.to_results.mean_ms


def stage_latency_ms(problem: Problem, plan: Plan) -> dict[str, float]:
    """Each stage's latency under the batching rule with no queue: an item waits at most the batch
    timeout, then its batch runs l(b) (the largest of the stage's assignments)."""
    return {sp.stage: max(config_of(problem, sp.stage, a, plan.rate_qps).exec_ms + a.batch_timeout_ms
                          for a in sp.assignments) for sp in plan.stages}


def stage_budgets_ms(problem: Problem, plan: Plan) -> dict[str, float]:
    """Each stage's share of the SLO: the SLO less the path's transits, split over the path's stages in
    proportion to their :func:`stage_latency_ms`; a stage on several paths takes its smallest share,
    so the shares of every path sum to at most its budget."""
    lat = stage_latency_ms(problem, plan)
    share: dict[str, float] = {}
    for p in problem.paths():
        total = sum(lat[s] for s in p)
        budget = max(0.0, problem.slo_ms - path_transit_ms(problem, p))
        for s in p:
            part = budget * lat[s] / total if total > 0 else budget / len(p)
            share[s] = min(share.get(s, math.inf), part)
    return share


def stage_capacity(problem: Problem, plan: Plan, windows_s: Sequence[float]) -> dict[str, StageCapacity]:
    """Every stage's :class:`StageCapacity` at ``windows_s``, with the plan's replicas."""
    budgets = stage_budgets_ms(problem, plan)
    out = {}
    for sp in plan.stages:
        a = sp.primary
        c = config_of(problem, sp.stage, a, plan.rate_qps)
        s_m = problem.visit_ratio(sp.stage)
        if s_m <= 0:  # no request reaches it: it limits nothing
            out[sp.stage] = StageCapacity(sp.stage, budgets[sp.stage], math.inf, tuple(math.inf for _ in windows_s))
            continue
        budget_ns, batch_ns = int(budgets[sp.stage] * NS_PER_MS), max(1, int(c.exec_ms * NS_PER_MS))
        timeout_ns = int(a.batch_timeout_ms * NS_PER_MS)
        one = [served_within(int(w * NS_PER_S), budget_ns, a.max_batch, batch_ns, timeout_ns) for w in windows_s]
        # a stage that cannot serve even a lone item within its share (l(b) + timeout > budget) has no
        # delay bound at any rate: no window capacity (the tuner sizes it to the sample, as before)
        bounded = served_within(0, budget_ns, a.max_batch, batch_ns, timeout_ns) > 0
        window = tuple(sp.replicas * n / (s_m * w) for n, w in zip(one, windows_s)) if bounded else ()
        curve = problem.stage(sp.stage).variant(a.variant).latency[a.hardware]
        out[sp.stage] = StageCapacity(sp.stage, budgets[sp.stage], sp.replicas * c.throughput_qps / s_m, window,
                                      a.variant, tuple(curve.ms(b) for b in range(1, a.max_batch + 1)))
    return out


def capacity_qps(problem: Problem, plan: Plan) -> tuple[float, str]:
    """The plan's sustained capacity in pipeline requests per second and its bottleneck stage."""
    if not plan.stages:
        return 0.0, ""
    caps = stage_capacity(problem, plan, ())
    stage = min(caps, key=lambda s: caps[s].rate_qps)
    return caps[stage].rate_qps, stage
