"""The planner service's pure step: forecast, build the problem, plan, decide whether to publish.

The Kafka loop (``slipstream.planner.run``) calls :meth:`Replanner.step` with the recent arrival timestamps
(epoch seconds, from the input topic's offsets by ``slipstream.streams.control_io.KafkaArrivals``: payloads are
never fetched) and ``now_ns``, publishes
``output.configs`` (StageConfig records, ``slipstream.schemas.records``) when ``output.changed``, and hands
``output.handoff`` to the tuner. Nothing here touches Kafka or a clock.

Tuner hand-off (InferLine section 2.4): the sample envelope over windows T_s, 2T_s, ... <= 60 s
(T_s = the plan's analytical service time; computed by the injected ``slipstream.tuner.envelope.envelope``), per stage the single-replica throughput mu_m of its
config, the visit ratio s_m, the planned replicas and rho_m = (lambda x s_m) / (replicas_m x mu_m),
the form that makes the tuner's k_m = r x s_m / (mu_m x rho_m) reproduce the planned replica count
at the planned rate r = lambda.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..schemas import records
from ..streams.arrivals import peak_rate_sliding
from ..streams import shares
from ..streams.control_rules import next_epoch
from . import calibrate, fallback, milp
from .capacity import StageCapacity, capacity_qps, ladders, stage_capacity
from .forecast import ForecastSettings, forecast_peak
from .modes import check, make_planner
from .plan import Plan, config_of, evaluate
from .problem import Problem
from .results import LATE

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplanSettings:
    mode: str = "milp"
    solver: str = "highs"
    time_limit_s: float = 5.0
    validate: bool = True
    sample_s: float = 60.0  # how much recent history the estimator replays
    forecast: ForecastSettings = field(default_factory=ForecastSettings)
    refit_min_batches: int = 200  # refit the calibration from recent results once this many batches ran (0: never)
    min_saving: float = fallback.MIN_SAVING  # what a re-plan must save to replace a plan that still holds


@dataclass(frozen=True)
class ReplanState:
    epoch: int = 0
    plan: Plan | None = None
    last_step_ns: int = 0


@dataclass(frozen=True)
class PlannedHandoff:
    """What the planner hands the tuner for a plan, before it is written as the TunerHandoff record
    (:func:`handoff_record`; ``slipstream.schemas.records.TunerHandoff``)."""

    planned_rate_qps: float
    windows_s: tuple[float, ...]
    sample_rates: tuple[float, ...] | None  # None until slipstream.tuner.envelope exists (lead wires it)
    mu_qps: Mapping[str, float]
    rho: Mapping[str, float]
    visit_ratio: Mapping[str, float]
    replicas: Mapping[str, int]
    capacity: Mapping[str, StageCapacity] = field(default_factory=dict)  # what the plan can serve, per stage
    host: tuple[float, float, float] | None = None  # the problem's host: (free cores, CPU ms per request, per window)


@dataclass(frozen=True)
class ReplanOutput:
    plan: Plan
    changed: bool
    forecast_qps: float
    configs: tuple[records.StageConfig, ...]  # to publish (empty when unchanged)
    handoff: PlannedHandoff | None
    problem: Problem  # the problem ``plan`` was made for: the base at the forecast rate, with the sample


def sample_for(arrivals_s: np.ndarray, now_s: float, rate_qps: float, sample_s: float,
               window_s: float) -> np.ndarray:
    """The last ``sample_s`` of arrivals, from 0, time-compressed when its peak is below the planned
    rate so the estimator checks the plan at the rate it was sized for."""
    a = np.sort(np.asarray(arrivals_s, dtype=float))
    a = a[(a >= now_s - sample_s) & (a < now_s)]
    if a.size == 0:
        return a
    a = a - a[0]
    peak = peak_rate_sliding(a, window_s)
    if 0 < peak < rate_qps:
        a = a * (peak / rate_qps)
    return a


def envelope_windows(service_ms: float, longest_s: float = 60.0) -> tuple[float, ...]:
    """Windows from the service time up, doubling, to ``longest_s``; ``(longest_s,)`` alone when the
    service time is longer (a sample shorter than one service time still has one window)."""
    w = max(service_ms / 1000.0, 1e-3)
    out = []
    while w <= longest_s:
        out.append(w)
        w *= 2
    return tuple(out) or (longest_s,)


EnvelopeFn = Callable[[np.ndarray, Sequence[float]], np.ndarray]


def handoff(problem: Problem, plan: Plan, envelope: EnvelopeFn | None = None) -> PlannedHandoff:
    """``envelope`` is ``slipstream.tuner.envelope.envelope``, passed in by the caller: planner must not
    import tuner (tests/unit/test_layers.py); without it ``sample_rates`` is None."""
    # no window longer than the sample: a sample of D seconds says nothing about the most arrivals
    # in a longer window, and dividing its count by the longer window would understate the plan
    arr = np.asarray(problem.arrivals_s)
    span = float(arr.max() - arr.min()) if arr.size > 1 else 60.0
    windows = envelope_windows(plan.analytic_latency_ms, min(60.0, max(span, 1e-3)))
    rates = None
    if envelope is not None:
        rates = tuple(float(x) for x in envelope(problem.arrivals_s, windows))
    mu, rho, sm, reps = {}, {}, {}, {}
    for sp in plan.stages:
        a = sp.primary
        m = config_of(problem, sp.stage, a, plan.rate_qps).throughput_qps
        s_m = problem.visit_ratio(sp.stage)
        mu[sp.stage], sm[sp.stage], reps[sp.stage] = m, s_m, sp.replicas
        rho[sp.stage] = (plan.rate_qps * s_m) / (sp.replicas * m) if sp.replicas and m else math.inf
    host = None if problem.host is None else (problem.host.free_cores, problem.host.request_cpu_ms,
                                              problem.host.window_cpu_ms)
    return PlannedHandoff(plan.rate_qps, windows, rates, mu, rho, sm, reps, stage_capacity(problem, plan, windows), host)


def handoff_record(h: PlannedHandoff, pipeline: str, epoch: int, at_ns: int = 0) -> records.TunerHandoff:
    """The hand-off as the TunerHandoff record (schemas/TunerHandoff.avsc), the one form the tuner
    reads, from the control topic or a file (``slipstream.tuner.planfile.from_handoff``)."""
    if h.sample_rates is None:
        raise ValueError("the hand-off has no sample envelope: build it with an envelope function")
    return records.TunerHandoff.from_dict({
            "pipeline": pipeline, "epoch": int(epoch), "mean_rate_qps": float(h.planned_rate_qps),
            "windows_s": [float(w) for w in h.windows_s], "rates_qps": [float(r) for r in h.sample_rates],
            "stages": [{"stage": s, "replicas": int(h.replicas[s]), "mu_qps": float(h.mu_qps[s]),
                        "visit_ratio": float(h.visit_ratio[s])} for s in h.replicas],
            "at_ns": int(at_ns),
            "capacity": [{"stage": c.stage, "budget_ms": float(c.budget_ms), "rate_qps": float(c.rate_qps),
                          "window_qps": [float(x) for x in c.window_qps], "variant": c.variant,
                          "service_ms": [float(x) for x in c.service_ms],
                          "ladder": [{"variant": r.variant, "accuracy": float(r.accuracy), "share": float(r.share),
                                      "rate_qps": float(r.rate_qps), "window_qps": [float(x) for x in r.window_qps],
                                      "service_ms": [float(x) for x in r.service_ms],
                                      "cpu_ms_per_item": float(r.cpu_ms_per_item)} for r in c.ladder],
                          "cpu_ms_per_item": float(c.cpu_ms_per_item)}
                         for c in h.capacity.values() if math.isfinite(c.rate_qps) and c.window_qps],
            "host": None if h.host is None else {"free_cores": float(h.host[0]), "request_cpu_ms": float(h.host[1]),
                                                  "window_cpu_ms": float(h.host[2])}})


def _finite(ms: float | None) -> float | None:
    """A p99 the record can carry: an infeasible plan's is infinite (more than 1 % late), which the
    control rules refuse (``slipstream.streams.control_rules``), so it is written as unknown (null)."""
    return ms if ms is not None and math.isfinite(ms) else None


def stage_configs(pipeline: str, plan: Plan, problem: Problem, epoch: int) -> tuple[records.StageConfig, ...]:
    """One StageConfig record per stage (fields of schemas/StageConfig.avsc). A stage with several
    assignments is deployed as its primary one with the stage's total replicas plus ``routing``
    (share of items per variant, ``StagePlan.routing``): every replica on the primary's hardware, so
    ``cost_per_hour`` is that pool's price, which differs from the plan's for a stage whose
    assignments the solver put on different hardware. A loki plan's ``routing`` names its stage's
    whole ladder (``slipstream.planner.capacity.ladders``; share 0: loaded, serving nothing)."""
    out = []
    named = ladders(problem, plan)
    for sp in plan.stages:
        a = sp.primary
        routing = named.get(sp.stage, sp.routing)
        cost = sp.replicas * problem.hardware[a.hardware].cost_per_hour
        out.append(records.StageConfig(
            pipeline=pipeline, stage=sp.stage, variant=a.variant, hardware=a.hardware,
            max_batch=int(a.max_batch), batch_timeout_ms=float(a.batch_timeout_ms),
            replicas=int(sp.replicas), partitions=int(sp.partitions), epoch=int(epoch),
            planner_mode=plan.mode, predicted_p99_ms=_finite(plan.predicted_p99_ms), routing=dict(routing),
            cost_per_hour=float(cost), reason=f"planned for {plan.rate_qps:.1f} qps",
            digests={},  # no pins: profiles do not record a model digest
        ))
    return tuple(out)


def judged(problem: Problem, plan: Plan) -> Plan:
    """``plan`` (its assignments) evaluated for ``problem`` and checked by the estimator on its sample:
    whether the plan in place still meets the SLO at the forecast."""
    if not plan.feasible:
        return plan
    now = evaluate(problem, plan.mode, {sp.stage: sp.assignments for sp in plan.stages}, rate_qps=problem.rate_qps)
    if problem.arrivals_s.size == 0:  # nothing to replay: capacity alone
        return replace(now, feasible=capacity_qps(problem, now)[0] >= problem.rate_qps)
    return check(problem, now)


def named_variants(problem: Problem, plan: Plan) -> dict[str, tuple[str, frozenset[str]]]:
    """Per stage, what its workers keep loaded under ``plan``'s StageConfig: (hardware, the variants
    its routing names; ``slipstream.streams.shares.named``)."""
    named = ladders(problem, plan)
    return {sp.stage: (sp.primary.hardware, frozenset(shares.named(named.get(sp.stage) or sp.routing, sp.primary.variant)))
            for sp in plan.stages}


def ladder_keeps_up(problem: Problem, plan: Plan) -> float:
    """The most a loki plan keeps up with once the tuner has done what it may without the planner:
    each stage at the most replicas it may run (``Problem.stage_cap``) and, with a ladder, all on
    its fastest rung; pipeline requests/s (the bottleneck's)."""
    caps = stage_capacity(problem, plan, ())
    out = math.inf
    for sp in plan.stages:
        c, n = caps[sp.stage], problem.stage_cap() or sp.replicas
        per_replica = max([c.rate_qps / sp.replicas, *(r.rate_qps for r in c.ladder)])
        out = min(out, max(n, sp.replicas) * per_replica)
    return out


def defers(problem: Problem, new: Plan, serving: Plan | None, serving_now: Plan | None) -> str:
    """Why a loki re-plan waits ("": it does not): the plan in place falls short of the forecast
    (``serving_now``, judged for it, is None or misses the SLO, and its replicas do not keep up with
    it: a burst, not a latency miss the tuner cannot mend) and the tuner keeps up with the forecast on
    its ladder (:func:`ladder_keeps_up`): the tuner's shares carry the burst. Redeploying would load
    models in the middle of it or, loading none, publish the re-plan's routing shares over those the
    tuner moved to for the live envelope at the workers' pace, which the tuner then moves back (run 3
    of the loki step, docs/results.md: a re-plan to half lite2, half lite1 in the burst, moved back
    to lite0 by three share moves in 0.6 s). Once the burst is over the plan in place holds again and
    the re-plan goes ahead (``slipstream.planner.fallback.replaces``)."""
    if serving is None or not ladders(problem, serving) or (serving_now is not None and serving_now.feasible) \
            or capacity_qps(problem, serving)[0] >= problem.rate_qps:
        return ""
    keeps_up = ladder_keeps_up(problem, serving)
    if keeps_up < problem.rate_qps:
        return ""
    before, after = named_variants(problem, serving), named_variants(problem, new)
    loads = sorted(st for st, named in after.items() if before.get(st) != named)
    what = (f"load models on {', '.join(loads)}" if loads else
            f"reset the routing shares the tuner moves on {', '.join(sorted(ladders(problem, serving)))}")
    return (f"the re-plan would {what} while the plan in place keeps up with {problem.rate_qps:.1f} qps on "
            f"its ladder ({keeps_up:.1f} qps): that plan stays, the tuner's shares carry the burst")


@dataclass(frozen=True)
class Replanner:
    """Holds the static inputs (the problem without its rate/sample, the settings)."""

    base: Problem
    pipeline: str
    settings: ReplanSettings = ReplanSettings()
    envelope: EnvelopeFn | None = None  # slipstream.tuner.envelope.envelope, injected by the CLI
    calibration: Mapping[str, Any] | None = None  # the one ``base`` is scaled by (None: as profiled)

    def refit(self, results: Sequence[records.InferenceResult], plan: Plan | None) -> "Replanner":
        """This replanner with a calibration fitted on ``results`` (recent ones from the results
        topic; ``plan`` says which hardware ran each variant); unchanged when there is too little to
        fit (``refit_min_batches``) or nothing fits."""
        if not self.settings.refit_min_batches or plan is None:
            return self
        hardware_of = plan.hardware_of()
        try:
            doc = calibrate.fit(results, calibrate.profiled_curves(self.base, self.calibration), hardware_of,
                                source="results topic", min_batches=self.settings.refit_min_batches,
                                timeouts_ms=calibrate.timeouts_of(plan.to_dict()))
        except calibrate.CalibrationFitError:
            return self
        doc = calibrate.carried_forward(doc, self.calibration)
        return replace(self, base=calibrate.recalibrated(self.base, doc, self.calibration), calibration=doc)

    def step(self, state: ReplanState, arrivals_s: np.ndarray, now_ns: int) -> tuple[ReplanOutput, ReplanState]:
        s = self.settings
        now_s = now_ns / 1e9
        rate = forecast_peak(arrivals_s, now_s, s.forecast)
        sample = sample_for(arrivals_s, now_s, rate, s.sample_s, s.forecast.window_s)
        problem = replace(self.base, rate_qps=rate, arrivals_s=sample)
        planner = make_planner(s.mode, solver=s.solver, time_limit_s=s.time_limit_s,
                               validate=s.validate and sample.size > 0)
        plan = planner.plan(problem)  # infeasible: the highest-capacity plan (fallback.replaces decides)
        if not plan.stages:
            out = ReplanOutput(plan, False, rate, (), None, problem)
            return out, replace(state, last_step_ns=now_ns)
        now = judged(problem, state.plan) if plan.feasible and state.plan is not None else None
        served = plan if fallback.replaces(problem, plan, state.plan, now, s.min_saving) else state.plan
        if served is plan and (why := defers(problem, plan, state.plan, now)):
            log.info("re-plan for %.1f qps: %s", rate, why)
            served = state.plan
        elif served is not plan and not plan.feasible:
            log.warning("re-plan for %.1f qps meets no SLO and serves no more than the plan in place: "
                        "that plan stays, the tuner scales beyond it", rate)
        elif served is not plan and served.key() != plan.key():
            log.info("re-plan for %.1f qps: the plan in place still meets the SLO and the new one "
                     "(%.3f $/h, accuracy %.3f) buys too little to redeploy: that plan stays", rate,
                     plan.cost_per_hour, plan.accuracy)
        changed = state.plan is None or served.key() != state.plan.key()
        epoch = next_epoch(state.epoch) if changed else state.epoch
        configs = stage_configs(self.pipeline, served, problem, epoch) if changed else ()
        out = ReplanOutput(plan, changed, rate, configs, handoff(problem, served, self.envelope), problem)
        new_state = ReplanState(epoch, served, now_ns)
        return out, new_state

    def runner_up(self, out: ReplanOutput) -> Plan | None:
        """For ``--explain``: the MILP's best other plan for the problem ``out.plan`` was made for (not
        the base problem); None unless the mode is milp and the plan feasible."""
        if self.settings.mode != "milp" or not out.plan.feasible:
            return None
        return milp.runner_up(out.problem, out.plan, milp.MilpOptions(self.settings.solver, self.settings.time_limit_s))


def explain(plan: Plan, runner_up: Plan | None = None, measured_p99_ms: float | None = None) -> list[str]:
    """Lines for ``--explain``: binding constraints, rounds, runner-up, predicted vs measured p99."""
    lines = [n for n in plan.notes]
    for i, r in enumerate(plan.rounds):
        p99 = "-" if r.predicted_p99_ms is None else f"{r.predicted_p99_ms:.1f} ms"
        lines.append(f"round {i}: budget {r.budget_ms:.1f} ms, rate {r.rate_qps:.1f} qps, cost "
                     f"{r.cost_per_hour:.3f} $/h, estimator p99 {p99}, {'ok' if r.feasible else 'miss'}")
    if runner_up is not None:
        if runner_up.feasible:
            desc = "; ".join(f"{sp.stage}: " + ", ".join(f"{a.variant}/{a.hardware}/b{a.max_batch}x{a.replicas}"
                                                         for a in sp.assignments) for sp in runner_up.stages)
            lines.append(f"runner-up: {runner_up.cost_per_hour:.3f} $/h "
                         f"(+{runner_up.cost_per_hour - plan.cost_per_hour:.3f}): {desc}")
        else:
            lines.append(f"runner-up: none ({runner_up.reason})")
    if measured_p99_ms is not None and plan.predicted_p99_ms is not None:
        lines.append(f"p99 ({LATE}) predicted {plan.predicted_p99_ms:.1f} ms vs measured {measured_p99_ms:.1f} ms "
                     f"(ratio {plan.predicted_p99_ms / measured_p99_ms:.2f})")
    return lines
