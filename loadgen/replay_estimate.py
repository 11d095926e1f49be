"""The estimator on the run that happened, for a like-for-like check of its p99.

The planner's "predicted p99" is the estimator on the planning sample at the planning rate. A live
run differs: its own arrivals, and the replica changes the tuner made. This module replays exactly
those through the plan (``slipstream.planner.estimator.simulate``) and sets the figures side by side, end to end
and per stage (the same definition on both sides: drops count as infinitely late, nearest rank).

- seeds: the estimate is the median p99 of :data:`SEEDS` simulations (each draws its own service
  times and transits), printed beside every seed's p99;
- the machine's pace: each variant's own, second by second, as the run measured it
  (``slipstream.planner.calibrate.run_pace``: its batches' service against the calibrated profile and the
  modelled core sharing), so a second in which another process took the cores is as slow in the
  replay as it was in the run. That is an input of the run like its arrivals; the estimate with
  the pace drawn from the calibration instead, as the planner must predict, is kept beside it
  (``drawn_p99_ms``);
- arrivals: every result's ``created_ns``, from the first, with its request id (what a mixed stage
  routes by);
- replica changes: every StageConfig the run saw on the control topic that changed a stage's
  replicas, at its time, as the estimator's ``ReplicaChange`` of the stage's primary assignment; an
  added replica serves ``in_worker_activation_s`` later (the worker takes a loaded spare replica);
- re-plans: every StageConfig the run saw on the control topic (the report's ``control.jsonl``) that
  changed a stage's variant, hardware, max batch or batch timeout, as a ``BatchingChange`` at its
  time (a new variant or hardware a model load later: the run's activation);
- shares: every StageConfig that changed the shares a stage routes by (the tuner's accuracy scaling,
  a re-plan's mix), as a ``ShareChange`` at its time (the variants are loaded: a routing change);
- per stage, measured residence is a hop's ``finished_ns - enqueued_ns`` (Kafka transit in, queue,
  batch and service), the longest over the request's items at that stage, as the estimator reports it;
- per stage, the components of a hop (:class:`Component`): transit (``received - enqueued``), queue
  and batch formation (``started - received``) and service (``finished - started``), measured, beside
  what the estimator was given for them: its transit distribution for that hop and the (calibrated)
  profile at the batch sizes the run used, times its service spread. Queue and batch formation are
  what the estimator computes; its residence row is the check on them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

import numpy as np

from ..planner.estimator import (BatchingChange, ReplicaChange, ShareChange, SimOptions, SimResult, network_for,
                               simulate)
from ..planner.plan import Plan
from ..planner.problem import Problem
from ..planner.results import nearest_rank
from ..planner.sim.params import Network, ServiceTime
from ..schemas.records import InferenceResult, TunerHandoff
from ..streams.calibration import key, pace_note
from .report import Summary

NS = 1_000_000_000
SEEDS = 5  # simulations per like-for-like estimate


@dataclass(frozen=True)
class StageCompare:
    stage: str
    measured_ms: tuple[float, float]  # p50, p99 of residence
    estimated_ms: tuple[float, float]


@dataclass(frozen=True)
class Component:
    stage: str
    name: str  # transit | queue+batch | service
    measured_ms: tuple[float, float]  # p50, p99
    estimated_ms: tuple[float, float] | None  # None: the estimator computes it, no input to compare


@dataclass(frozen=True)
class LikeForLike:
    measured_p99_ms: float
    estimated_p99_ms: float
    measured_attainment: float
    estimated_attainment: float
    stages: tuple[StageCompare, ...]
    components: tuple[Component, ...] = ()
    seed_p99_ms: tuple[float, ...] = ()  # the estimator's p99 with each seed; the median is the estimate
    drawn_p99_ms: float = math.nan  # the same with the machine's pace drawn from the calibration
    drawn_attainment: float = math.nan
    # the forward prediction: the plan as published, the tuner policy stepped over the arrivals that
    # came (not the run's own replica changes or re-plans), the pace drawn from the calibration
    forward_p99_ms: float = math.nan
    forward_attainment: float = math.nan
    forward_changes: int = 0  # replica and share changes the stepped tuner made
    forward_shed: float = math.nan  # share of the requests the forward prediction's source gate shed
    served_ms: tuple[float, float] = (math.nan, math.nan)  # p99 of the served requests: measured, estimated
    # the plan's variants whose drawn pace the calibration's own runs did not measure, and where it came
    # from instead (slipstream.streams.calibration.pace_sources): the drawn and forward predictions trust it less
    unmeasured_pace: tuple[str, ...] = ()

    @property
    def ratio(self) -> float:
        """estimated / measured p99 (1 is exact)."""
        return self.estimated_p99_ms / self.measured_p99_ms if self.measured_p99_ms > 0 else math.nan

    @property
    def error(self) -> float:
        """|estimated - measured| / measured."""
        return abs(self.ratio - 1.0)


def run_arrivals(results: Sequence[InferenceResult]) -> tuple[np.ndarray, list[str]]:
    """Arrival times (s from the first) and the request ids in that order: a mixed stage routes the
    same requests to the same variants as the run did (``slipstream.streams.shares.choose``)."""
    order = sorted(results, key=lambda r: r.created_ns)
    created = np.array([r.created_ns for r in order], dtype=np.int64)
    return ((created - created[0]) / NS if created.size else np.empty(0)), [r.request_id for r in order]


def run_changes(control: Sequence[tuple[int, Mapping[str, Any]]], plan: Plan, start_ns: int) -> list[ReplicaChange]:
    """The run's replica changes at their StageConfig's time on the control topic (``control`` as in
    :func:`batching_changes`; what was in force at the start, ``start_ns``, is a change at 0 s where it
    differs from ``plan``), on each stage's primary assignment (other assignments keep theirs)."""
    from ..planner.calibrate import configs_in_force

    current = {sp.stage: sp.replicas for sp in plan.stages}
    out = []
    for at_ns, rec in configs_in_force(control, start_ns):
        stage, replicas = rec["stage"], int(rec["replicas"])
        if current.get(stage, replicas) == replicas:
            continue
        current[stage], sp = replicas, plan.stage(stage)
        others = sp.replicas - sp.primary.replicas
        out.append(ReplicaChange(max(0.0, (at_ns - start_ns) / NS), stage, max(1, replicas - others),
                                 sp.assignments.index(sp.primary)))
    return out


def share_changes(control: Sequence[tuple[int, Mapping[str, Any]]], plan: Plan, start_ns: int) -> list[ShareChange]:
    """The run's routing shares (the tuner's accuracy scaling, a re-plan's mix) at their StageConfig's
    time on the control topic (``control`` as in :func:`batching_changes`), where the shares in
    service change (``slipstream.streams.shares.in_service``); what was in force at ``start_ns`` is a change at 0 s
    where it differs from ``plan``."""
    from ..planner.calibrate import configs_in_force
    from ..streams.shares import in_service

    current = {sp.stage: in_service(sp.routing, sp.primary.variant) for sp in plan.stages}
    out = []
    for at_ns, rec in configs_in_force(control, start_ns):
        stage = rec["stage"]
        use = in_service(rec.get("routing") or {}, rec["variant"])
        if stage not in current or current[stage] == use:
            continue
        current[stage] = use
        out.append(ShareChange(max(0.0, (at_ns - start_ns) / NS), stage, use))
    return out


def batching_changes(control: Sequence[tuple[int, Mapping[str, Any]]], plan: Plan, start_ns: int,
                     activation_s: float) -> list[BatchingChange]:
    """The re-plans' batching as the run saw them: ``control`` is (Kafka timestamp ns, record) of the
    control topic; the newest epoch per stage wins; what was in force when the run started (``start_ns``,
    its first arrival) is a change at 0 s where it differs from ``plan``; a later change that brings a
    new variant or hardware takes effect a model load (``activation_s``) after its record."""
    from ..planner.calibrate import configs_in_force

    current = {sp.stage: _batching(sp.primary) for sp in plan.stages}
    configs = [((at_ns - start_ns) / NS, rec["stage"],
                (rec["variant"], rec["hardware"], int(rec["max_batch"]), float(rec["batch_timeout_ms"])))
               for at_ns, rec in configs_in_force(control, start_ns) if rec["stage"] in current]
    out = []
    for stage in current:
        before = [b for t, st, b in configs if st == stage and t <= 0]  # the one in force at the start
        if before and before[-1] != current[stage]:
            current[stage] = before[-1]
            out.append(BatchingChange(0.0, stage, *before[-1]))
    for t, stage, new in configs:
        if t > 0 and new != current[stage]:
            load = activation_s if new[:2] != current[stage][:2] else 0.0
            out.append(BatchingChange(t + load, stage, *new))
            current[stage] = new
    return out


def _batching(a) -> tuple[str, str, int, float]:
    return a.variant, a.hardware, a.max_batch, float(a.batch_timeout_ms)


def measured_residence_ms(results: Sequence[InferenceResult], stage: str) -> np.ndarray:
    """Per request that reached ``stage``: its longest hop residence there (drops at it: infinite)."""
    out = []
    for r in results:
        hops = [h for h in r.hops if h.stage == stage]
        if hops:
            out.append(max(h.finished_ns - h.enqueued_ns for h in hops) / 1e6)
        elif r.status == "dropped" and f"{stage}:" in r.reason:
            out.append(math.inf)
    return np.asarray(out, dtype=float)


def _p(a, q: float) -> float:
    return nearest_rank(np.asarray(a, dtype=float), q) if len(a) else math.nan


def components(problem: Problem, plan: Plan, results: Sequence[InferenceResult], network: Network,
               service: ServiceTime, seed: int = 0) -> tuple[Component, ...]:
    """Per stage, each hop component measured, beside the estimator's input for it (see the module
    docstring); hops without ``received_ns`` (older records) give no components."""
    from ..planner.calibrate import components as hop_parts

    rng = np.random.default_rng(seed)
    by_stage: dict[str, list[tuple]] = {}
    for kind, stage, variant, batch, t, w, sv in hop_parts(results):
        by_stage.setdefault(stage, []).append((kind, variant, batch, t / 1e6, w / 1e6, sv / 1e6))
    out = []
    for stage, rows in by_stage.items():
        kinds = {r[0] for r in rows}
        transit = {"ingress": network.ingress, "between": network.between, "to_join": network.to_join}
        model_t = np.concatenate([transit[k].sample(rng, 2000) for k in sorted(kinds)])
        est_s = None
        if stage in {sp.stage for sp in plan.stages}:
            sp = plan.stage(stage)
            drawn = []
            for a in {a.variant: a for a in sp.assignments}.values():  # each with its own spread (for_variant)
                curve = problem.stage(stage).variant(a.variant).latency[a.hardware]
                base = np.array([curve.ms(r[2]) for r in rows if r[1] == a.variant])
                if base.size:
                    drawn.append(base * service.for_variant(key(a.variant, a.hardware)).factors(rng, base.size, base))
            if drawn:
                f = np.concatenate(drawn)
                est_s = (_p(f, 50), _p(f, 99))
        col = list(zip(*rows))
        out += [Component(stage, "transit", (_p(col[3], 50), _p(col[3], 99)), (_p(model_t, 50), _p(model_t, 99))),
                Component(stage, "queue+batch", (_p(col[4], 50), _p(col[4], 99)), None),
                Component(stage, "service", (_p(col[5], 50), _p(col[5], 99)), est_s)]
    return tuple(out)


def compare(summary: Summary, results: Sequence[InferenceResult], sim: SimResult) -> LikeForLike:
    stages = []
    for i, name in enumerate(sim.stage_names):
        m = measured_residence_ms(results, name)
        e = sim.stage_ms[:, i]
        e = np.where(np.isnan(e), -1.0, e)
        e = e[e >= 0]
        stages.append(StageCompare(name, (nearest_rank(m, 50), nearest_rank(m, 99)),
                                   (nearest_rank(e, 50), nearest_rank(e, 99))))
    return LikeForLike(summary.latency.p99_ms, sim.p99_ms, summary.attainment, sim.attainment, tuple(stages))


def estimate_run(problem: Problem, plan: Plan, summary: Summary, results: Sequence[InferenceResult], *,
                 control: Sequence[tuple[int, Mapping[str, Any]]] = (), seed: int = 0, seeds: int = SEEDS,
                 forward: Sequence[ReplicaChange] | None = None,
                 in_worker_activation_s: float | None = None, handoff: TunerHandoff | None = None) -> LikeForLike:
    """The estimator on this run's arrivals, replica changes and re-plans (``control``: what it saw
    on the control topic) and the machine's pace as the run measured it, against what
    was measured: one simulation per seed (``seed``, ``seed + 1``, ...); the run with the median p99
    is the estimate (a single run's p99 moves by tens of percent from seed to seed once service and
    transits vary). ``drawn_p99_ms`` is the same with the pace drawn from the calibration. The
    problem's activation time, network and service spread are the simulation's, and an added replica
    serves ``in_worker_activation_s`` after its change (default: the activation time). ``forward`` (the
    replica changes the tuner policy makes on these arrivals, ``slipstream.loadgen.simulate.tuner_changes``;
    empty for an untuned mode) adds the forward prediction (:func:`forward_estimate`). ``handoff``
    (the TunerHandoff record published for the plan, ``slipstream.loadgen.simulate.published_handoff``) makes
    every simulation's source stage shed as the workers' does (``slipstream.planner.sim.gate``)."""
    arrivals, ids = run_arrivals(results)
    start_ns = min((r.created_ns for r in results), default=0)
    changes = (*run_changes(control, plan, start_ns), *batching_changes(control, plan, start_ns, problem.activation_s),
               *share_changes(control, plan, start_ns))
    at = replace(problem, arrivals_s=arrivals)
    service = problem.service
    options = SimOptions(schedule=changes, request_ids=ids, in_worker_activation_s=in_worker_activation_s,
                         handoff=handoff)
    drawn, drawn_seeds = median_run(at, plan, options, seed, seeds)
    own = run_service(problem, plan, results, control, start_ns, service)
    sim, seed_p99 = (drawn, drawn_seeds) if own is service else median_run(replace(at, service=own), plan, options,
                                                                            seed, seeds)
    network = network_for(problem)
    done = [(r.finished_ns - r.created_ns) / 1e6 for r in results if r.status == "done"]
    served = sim.latency_ms[~sim.dropped]
    fwd = {}
    if forward is not None:
        f = forward_estimate(at, plan, forward, options, seed, seeds)
        fwd = dict(forward_p99_ms=f.p99_ms, forward_attainment=f.attainment, forward_changes=len(forward),
                   forward_shed=f.shed_share)
    return replace(compare(summary, results, sim), seed_p99_ms=seed_p99, drawn_p99_ms=drawn.p99_ms,
                   drawn_attainment=drawn.attainment, served_ms=(_p(done, 99), _p(served, 99)),
                   components=components(problem, plan, results, network, service, seed), **fwd)


def median_run(problem: Problem, plan: Plan, options: SimOptions, seed: int = 0, seeds: int = SEEDS
               ) -> tuple[SimResult, tuple[float, ...]]:
    """The simulation of ``problem``'s arrivals with the median p99 of ``seeds`` (seeds ``seed``,
    ``seed + 1``, ...), and every seed's p99 in order."""
    sims = sorted((simulate(replace(problem, seed=seed + i), plan, options) for i in range(seeds)),
                  key=lambda r: r.p99_ms)
    return sims[len(sims) // 2], tuple(r.p99_ms for r in sims)


def forward_estimate(problem: Problem, plan: Plan, tuner_schedule: Sequence[ReplicaChange],
                     options: SimOptions = SimOptions(), seed: int = 0, seeds: int = SEEDS) -> SimResult:
    """The forward prediction of a run: what the planner could have predicted before it, told only
    the arrivals that came (``problem.arrivals_s``). The plan as published, the replica changes the
    tuner policy makes on those arrivals (``tuner_schedule``), no re-plan (the planner service's
    re-plans depend on the run), and the machine's pace drawn from the calibration (the problem's
    service), not the run's own; the median over seeds (:func:`median_run`). This is what
    ``slipstream simulate`` predicts for the same trace, so its error against a live run is how far
    the simulator can be trusted."""
    return median_run(problem, plan, replace(options, schedule=tuple(tuner_schedule)), seed, seeds)[0]


def run_service(problem: Problem, plan: Plan, results: Sequence[InferenceResult],
                control: Sequence[tuple[int, Mapping[str, Any]]], start_ns: int, service: ServiceTime) -> ServiceTime:
    """``service`` with each variant's pace as this run measured it (``ServiceTime.timelines``, one
    window per ``service.slowdown_window_s``); ``service`` itself when no batch of the run has a
    profile in ``problem``."""
    from ..planner.calibrate import RunHops, configs_in_force, run_pace

    hardware_of = plan.hardware_of()
    for _at, rec in configs_in_force(control, start_ns):  # a re-plan may have run a variant on other hardware
        if "variant" in rec:
            hardware_of.setdefault((rec["stage"], rec["variant"]), rec["hardware"])
    curves = {(v.name, hw): c for st in problem.stages for v in st.variants for hw, c in v.latency.items()}
    paces = run_pace(RunHops(list(results), hardware_of), curves, problem.host, start_ns, service.slowdown_window_s)
    return replace(service, timelines=tuple(sorted(paces.items()))) if paces else service


def format_like_for_like(x: LikeForLike) -> str:
    head = f"{'(drops = late)':<22}{'measured':>12}{'estimator':>12}{'ratio':>8}"
    lines = [head, f"{'end-to-end p99 ms':<22}{x.measured_p99_ms:>12.1f}{x.estimated_p99_ms:>12.1f}{x.ratio:>8.2f}",
             f"{'SLO attainment':<22}{100 * x.measured_attainment:>11.2f}%{100 * x.estimated_attainment:>11.2f}%"]
    if len(x.seed_p99_ms) > 1:
        lines.append(f"(estimator p99 per seed: {' / '.join(f'{v:.1f}' for v in x.seed_p99_ms)} ms; the median above)")
    if not math.isnan(x.drawn_p99_ms):
        r = x.drawn_p99_ms / x.measured_p99_ms if x.measured_p99_ms > 0 else math.nan
        lines.append(f"{'p99, pace drawn':<22}{x.measured_p99_ms:>12.1f}{x.drawn_p99_ms:>12.1f}{r:>8.2f}")
        lines.append(f"{'SLO, pace drawn':<22}{100 * x.measured_attainment:>11.2f}%{100 * x.drawn_attainment:>11.2f}%")
    if not math.isnan(x.forward_p99_ms):
        r = x.forward_p99_ms / x.measured_p99_ms if x.measured_p99_ms > 0 else math.nan
        lines.append(f"{'p99, forward':<22}{x.measured_p99_ms:>12.1f}{x.forward_p99_ms:>12.1f}{r:>8.2f}")
        lines.append(f"{'SLO, forward':<22}{100 * x.measured_attainment:>11.2f}%{100 * x.forward_attainment:>11.2f}%")
        lines.append(f"(forward: the plan as published, {x.forward_changes} replica and share changes of the tuner "
                     f"policy stepped over these arrivals, no re-plan, pace drawn; {100 * x.forward_shed:.1f}% shed "
                     f"at the source)")
    if x.unmeasured_pace:
        lines.append(f"({pace_note(x.unmeasured_pace)})")
    m, e = x.served_ms
    if not math.isnan(m):
        lines.append(f"{'p99 of served ms':<22}{m:>12.1f}{e:>12.1f}{e / m if m > 0 else math.nan:>8.2f}")
    for s in x.stages:
        for k, q in ((0, "p50"), (1, "p99")):
            m, e = s.measured_ms[k], s.estimated_ms[k]
            r = e / m if m > 0 and math.isfinite(m) else math.nan
            lines.append(f"{s.stage + ' residence ' + q:<22}{m:>12.1f}{e:>12.1f}{r:>8.2f}")
    if x.components:
        lines.append(f"{'hop components (ms)':<22}{'measured':>12}{'est. input':>12}")
    for c in x.components:
        for k, q in ((0, "p50"), (1, "p99")):
            e = "computed" if c.estimated_ms is None else f"{c.estimated_ms[k]:.1f}"
            lines.append(f"{f'{c.stage} {c.name} {q}':<22}{c.measured_ms[k]:>12.1f}{e:>12}")
    return "\n".join(lines)
