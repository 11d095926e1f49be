"""Simulated runs: a plan replayed through the estimator (``slipstream.planner.estimator``) instead of Kafka,
turned into the same result records (``InferenceResult``) and the same
:class:`~slipstream.loadgen.report.Summary` as a real replay.

How estimator output maps onto InferenceResult fields (documented limits of a simulation):

- ``created_ns`` = start + arrival, ``deadline_ns`` = created + SLO; a done request's
  ``finished_ns`` = created + latency; a dropped one's is the simulated time of the drop decision,
  and its reason is the estimator's (``stage X: deadline: ...``, or ``stage X: shed: ...`` for the
  source gate's, ``slipstream.planner.sim.gate``).
- ``hops``: one per stage the request visited, with the stage's longest item residence as
  ``finished_ns - enqueued_ns`` (``enqueued_ns = 0``) and ``started_ns = None``: the estimator reports
  queueing + batch time together, so the report shows residence, not a queue/service split.
  ``variant`` is the stage's primary assignment (``mixed:<primary>`` when the stage has several).
- ``accuracy`` = the plan's expected pipeline accuracy (the estimator does not say which variant
  of a mixed stage served an item, nor follows the tuner's share changes there).
- cost: the plan's per-stage cost at start, then every replica change of the tuner schedule (a share
  change costs nothing: the replicas stay).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

from ..planner.estimator import ReplicaChange, ShareChange, SimOptions, SimResult, simulate
from ..planner.plan import Plan
from ..planner.problem import Problem
from ..schemas.records import HopTiming, InferenceResult, TunerHandoff
from ..streams.contract import deadline_ns
from .cost import ConfigEvent
from .report import Envelope, Summary, summarize

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000


@dataclass(frozen=True)
class SimulatedRun:
    summary: Summary
    sim: SimResult
    changes: tuple[ReplicaChange | ShareChange, ...]


def results_from_sim(problem: Problem, plan: Plan, sim: SimResult, *, start_ns: int = 0,
                     id_prefix: str = "sim") -> list[InferenceResult]:
    """The simulated requests as result records (the mapping in the module docstring)."""
    created = start_ns + np.round(sim.arrival_s * NS_PER_S).astype(np.int64)
    variant = {sp.stage: sp.primary.variant if len(sp.assignments) == 1 else f"mixed:{sp.primary.variant}"
               for sp in plan.stages}
    out: list[InferenceResult] = []
    for i in range(sim.requests):
        c = int(created[i])
        hops = tuple(HopTiming(stage=s, variant=variant.get(s, ""), batch_size=0, enqueued_ns=0, started_ns=None,
                               finished_ns=int(ms * NS_PER_MS), worker="sim")
                     for s, ms in zip(sim.stage_names, sim.stage_ms[i]) if not np.isnan(ms))
        if sim.dropped[i]:
            status, reason = "dropped", sim.reason(i)
            finished = start_ns + int(sim.drop_info_ns[i][1])
        else:
            status, reason = "done", ""
            finished = c + int(round(float(sim.latency_ms[i]) * NS_PER_MS))
        out.append(InferenceResult(request_id=f"{id_prefix}-{i:08d}", pipeline=problem.name, status=status,
                                   reason=reason, created_ns=c, deadline_ns=deadline_ns(c, problem.slo_ms),
                                   finished_ns=finished, hops=hops, accuracy=plan.accuracy))
    return out


def config_events(problem: Problem, plan: Plan, changes: Sequence[ReplicaChange | ShareChange] = (), *,
                  start_ns: int = 0) -> list[ConfigEvent]:
    """Replicas and cost per stage over time: the plan at ``start_ns``, then each replica change. A
    stage runs as deployed (``slipstream.planner.service.stage_configs``): all its replicas on the primary
    assignment's hardware, priced at that hardware's rate."""
    price = {h: o.cost_per_hour for h, o in problem.hardware.items()}
    groups = {sp.stage: [[a.replicas, price[sp.primary.hardware], sp.primary.hardware, sp.primary.variant]
                         for a in sp.assignments] for sp in plan.stages}

    def event(at_ns: int, stage: str) -> ConfigEvent:
        g = groups[stage]
        return ConfigEvent(at_ns, stage, sum(r for r, *_ in g), sum(r * p for r, p, *_ in g), g[0][2], g[0][3])

    out = [event(start_ns, sp.stage) for sp in plan.stages]
    for c in sorted((c for c in changes if isinstance(c, ReplicaChange)), key=lambda c: c.time_s):
        groups[c.stage][c.index][0] = c.replicas
        out.append(event(start_ns + int(c.time_s * NS_PER_S), c.stage))
    return out


def simulate_run(problem: Problem, plan: Plan, arrivals_s: np.ndarray, *,
                 changes: Sequence[ReplicaChange | ShareChange] = (), seed: int = 0, label: str = "",
                 envelope: Envelope | None = None, activation_s: float | None = None,
                 start_ns: int = 0, notes: Sequence[str] = ()) -> SimulatedRun:
    """Replay ``arrivals_s`` through ``plan`` (with the tuner's replica and share changes) and summarise."""
    if not plan.stages:
        raise ValueError(f"plan {plan.mode} has no stages: {plan.reason}")
    arr = np.sort(np.asarray(arrivals_s, dtype=float))
    act = problem.activation_s if activation_s is None else activation_s
    sim = simulate(replace(problem, arrivals_s=arr, seed=seed, activation_s=act), plan,
                   SimOptions(schedule=tuple(changes), handoff=published_handoff(problem, plan)))
    results = results_from_sim(problem, plan, sim, start_ns=start_ns)
    end_ns = start_ns + int(max(float(arr[-1]) if len(arr) else 0.0,
                                max((r.finished_ns - start_ns for r in results), default=0) / NS_PER_S)
                            * NS_PER_S)
    summary = summarize(
        results, slo_ms=problem.slo_ms, pipeline=problem.name, label=label or f"{problem.name} {plan.mode}",
        source="simulate", sent=len(results), start_ns=start_ns, end_ns=end_ns,
        configs=config_events(problem, plan, changes, start_ns=start_ns), envelope=envelope,
        notes=(f"plan {plan.mode}: ${plan.cost_per_hour:.3f}/h planned, "
               f"{sum(isinstance(c, ReplicaChange) for c in changes)} tuner replica changes, "
               f"{sum(isinstance(c, ShareChange) for c in changes)} share changes, {sim.events} simulator events, "
               f"{100 * sim.shed_share:.1f}% shed at the source",
               *notes),
    )
    return SimulatedRun(summary, sim, tuple(changes))


def published_handoff(problem: Problem, plan: Plan) -> TunerHandoff:
    """The TunerHandoff record the planner publishes for ``plan`` (``slipstream.planner.run.publish_plan``): what
    the live tuner steps from and what the source stage's gate reads its capacity from, so the
    estimator's tuner and gate read the same one."""
    from ..planner.service import handoff, handoff_record
    from ..tuner.envelope import envelope

    return handoff_record(handoff(problem, plan, envelope), problem.name, 0)


def tuner_changes(problem: Problem, plan: Plan, arrivals_s: np.ndarray, *, tick_s: float,
                  config: Any) -> list[ReplicaChange | ShareChange]:
    """Step the tuner policy (``config``: ``slipstream.tuner.policy.TunerConfig``) over ``arrivals_s`` (seconds)
    one decision every ``tick_s``, as the tuner service steps it, from the hand-off the planner
    publishes for ``plan``; the estimator's replica changes and (a loki plan's ladder) share changes.
    The live runs' forward prediction steps the same (``slipstream.loadgen.live.run.like_for_like``)."""
    from ..tuner import planfile
    from ..tuner.envelope import EnvelopeTracker
    from ..tuner.policy import TunerState, decide, observe, tracker_windows

    tplan = planfile.from_handoff(published_handoff(problem, plan))
    tracker = EnvelopeTracker(tracker_windows(tplan, config))
    state = TunerState.initial(tplan, 0)
    ns = np.round(np.asarray(arrivals_s) * 1e9).astype(np.int64)
    changes = []
    other = {sp.stage: sp.replicas - sp.primary.replicas for sp in plan.stages}
    index = {sp.stage: sp.assignments.index(sp.primary) for sp in plan.stages}
    lo = 0
    end = float(arrivals_s[-1]) if len(arrivals_s) else 0.0
    for k in range(1, int(np.ceil(end / tick_s)) + 1):
        now = int(k * tick_s * 1e9)
        hi = int(np.searchsorted(ns, now, side="right"))
        tracker.add(ns[lo:hi])
        lo = hi
        decision, state = decide(observe(tracker, tplan, now, config), tplan, state, now, config)
        for c in decision.changes:
            changes.append(ReplicaChange(now / 1e9, c.stage, max(1, c.replicas - other[c.stage]),
                                         index[c.stage]))
        changes += [ShareChange(now / 1e9, c.stage, dict(c.shares)) for c in decision.share_changes]
    return changes
