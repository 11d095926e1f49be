"""What a plan can serve: per stage, the rate its replicas keep up with and, per window, the most
arrivals within that window they serve within the stage's share of the SLO (docs/tuner.md, "What the
plan can serve").

The tuner scales on these numbers (the planner hands them over in the ``TunerHandoff`` record), and
a plan that meets no SLO is described by them (``capacity_qps``, ``slipstream.planner.fallback``). They come
from the model the estimator runs: the stage's latency curve (``slipstream.streams.latency``) at the deployed
batch size and the batching rule's service curve (``slipstream.streams.batching.served_within``). A stage runs
as deployed (``slipstream.planner.service.stage_configs``): all its replicas with the primary assignment's
variant, hardware, max batch and batch timeout.

A loki plan's stage also keeps its *ladder* loaded (:func:`ladders`): every variant of the stage
its pool may serve on the primary's hardware, each with the plan's share (0: loaded, serving
nothing). Re-plans route among them without a model load, and the tuner moves shares down the
ladder when the live envelope exceeds the plan (docs/tuner.md, "Accuracy scaling in the fast
loop"), reading each rung's capacity per replica (:class:`Rung`) from the hand-off.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

from ..streams.batching import served_within
from .plan import Assignment, Plan, config_of
from .problem import Problem
from .sim.params import Network, Transit

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class Rung:
    """One variant of a stage's ladder: what one replica of the stage's pool (the primary's hardware,
    max batch and timeout) serves on it, in pipeline requests per second."""

    variant: str
    accuracy: float
    share: float  # the plan's share of the stage's items (0: loaded, serving nothing)
    rate_qps: float  # what one replica keeps up with, back to back at the pool's max batch
    window_qps: tuple[float, ...]  # per window: one replica's capacity within the budget (empty: none)
    service_ms: tuple[float, ...]  # l(b) for b = 1..max batch on the pool's hardware
    cpu_ms_per_item: float = 0.0  # host CPU one item takes on it (``Config.cpu_ms_per_item``)


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
    ladder: tuple[Rung, ...] = ()  # loki: the variants its pool keeps loaded, most accurate first
    cpu_ms_per_item: float = 0.0  # host CPU one item takes at the planned assignments (:func:`item_cpu_ms`)


def item_cpu_ms(problem: Problem, sp) -> float:
    """Host CPU ms one item of stage plan ``sp`` takes: its assignments' ``Config.cpu_ms_per_item``
    weighted by their share of the stage's items."""
    weights = sum(a.weight for a in sp.assignments) or 1.0
    return sum(a.weight / weights * config_of(problem, sp.stage, a).cpu_ms_per_item for a in sp.assignments)


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


def ladders(problem: Problem, plan: Plan) -> dict[str, dict[str, float]]:
    """Per stage of a loki plan, the variants its pool keeps loaded, most accurate first, each with the
    plan's share: every variant of the stage profiled on the primary's hardware (at or above the
    accuracy floor, when there is one) and those the plan routes to, for stages with more than one.
    A re-plan on the same hardware names the same variants, so it loads no model. {} for other modes
    (they switch no variant live)."""
    if plan.mode != "loki":
        return {}
    floor = problem.accuracy_floor
    out = {}
    for sp in plan.stages:
        hw, planned = sp.primary.hardware, sp.routing or {sp.primary.variant: 1.0}
        stage = problem.stage(sp.stage)
        names = {v.name for v in stage.variants if hw in v.latency and (not floor or v.accuracy >= floor)}
        ordered = sorted(names | set(planned), key=lambda n: (-stage.variant(n).accuracy, n))
        if len(ordered) > 1:  # one variant: nothing to move to
            out[sp.stage] = {n: float(planned.get(n, 0.0)) for n in ordered}
    return out


def _served(problem: Problem, stage: str, a: Assignment, budget_ms: float, windows_s: Sequence[float]
            ) -> tuple[float, tuple[float, ...], tuple[float, ...]]:
    """What ``a``'s replicas serve, in pipeline requests/s: (the rate they keep up with, per window the
    most within it served within ``budget_ms`` (empty when a lone item misses it), l(b) by batch size)."""
    curve = problem.stage(stage).variant(a.variant).latency[a.hardware]
    s_m = problem.visit_ratio(stage)
    budget_ns, batch_ns = int(budget_ms * NS_PER_MS), max(1, int(curve.ms(a.max_batch) * NS_PER_MS))
    timeout_ns = int(a.batch_timeout_ms * NS_PER_MS)
    one = [served_within(int(w * NS_PER_S), budget_ns, a.max_batch, batch_ns, timeout_ns) for w in windows_s]
    # a stage that cannot serve even a lone item within its share (l(b) + timeout > budget) has no
    # delay bound at any rate: no window capacity (the tuner sizes it to the sample, as before)
    bounded = served_within(0, budget_ns, a.max_batch, batch_ns, timeout_ns) > 0
    window = tuple(a.replicas * n / (s_m * w) for n, w in zip(one, windows_s)) if bounded else ()
    rate = a.replicas * curve.throughput_qps(a.max_batch) / s_m
    return rate, window, tuple(curve.ms(b) for b in range(1, a.max_batch + 1))


def stage_capacity(problem: Problem, plan: Plan, windows_s: Sequence[float]) -> dict[str, StageCapacity]:
    """Every stage's :class:`StageCapacity` at ``windows_s``, with the plan's replicas (and a loki
    plan's ladder, one replica per rung)."""
    budgets = stage_budgets_ms(problem, plan)
    named = ladders(problem, plan)
    out = {}
    for sp in plan.stages:
        a = replace(sp.primary, replicas=sp.replicas)
        if problem.visit_ratio(sp.stage) <= 0:  # no request reaches it: it limits nothing
            out[sp.stage] = StageCapacity(sp.stage, budgets[sp.stage], math.inf, tuple(math.inf for _ in windows_s))
            continue
        rate, window, service = _served(problem, sp.stage, a, budgets[sp.stage], windows_s)
        ladder = tuple(Rung(v, problem.stage(sp.stage).variant(v).accuracy, share,
                            *_served(problem, sp.stage, replace(a, variant=v, replicas=1), budgets[sp.stage],
                                     windows_s),
                            config_of(problem, sp.stage, replace(a, variant=v)).cpu_ms_per_item)
                       for v, share in named.get(sp.stage, {}).items()
                       if a.hardware in problem.stage(sp.stage).variant(v).latency)
        out[sp.stage] = StageCapacity(sp.stage, budgets[sp.stage], rate, window, a.variant, service, ladder,
                                      item_cpu_ms(problem, sp))
    return out


def capacity_qps(problem: Problem, plan: Plan) -> tuple[float, str]:
    """The plan's sustained capacity in pipeline requests per second and its bottleneck stage."""
    if not plan.stages:
        return 0.0, ""
    caps = stage_capacity(problem, plan, ())
    stage = min(caps, key=lambda s: caps[s].rate_qps)
    return caps[stage].rate_qps, stage
