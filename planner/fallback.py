"""When no plan meets the SLO, no mode refuses: it deploys the highest-capacity plan its rules allow,
flagged infeasible with its capacity, and says so (docs/planner.md, "Infeasible plans").

One function for every mode (:func:`serve_anyway`, applied by ``slipstream.planner.modes.make_planner``). The
workers then drop early, with a reason, what cannot meet its deadline (``slipstream.streams.batching.decide``),
as Clockwork and Loki do under overload.

The highest-capacity plan (:func:`highest_capacity`), per stage, from the variants the mode may use
(milp and loki: every variant, those at or above the accuracy floor when there is one; inferline and
the cg baselines: the most accurate one) on any hardware of the problem:

- the stage's share of the SLO: the SLO less the path's transits, split over the path's stages in
  proportion to their fastest config's batch-1 latency (the smallest share over its paths);
- the config: the highest single-replica throughput b / l(b) whose no-queue latency l(b) + timeout
  fits that share (timeout = ``slipstream.planner.plan``'s rule), else the fastest batch of 1;
- replicas: enough to keep up with the rate (ceil(lambda_s / mu)); beyond the cluster cap, the cap
  filled one replica at a time to the stage with the least capacity (requests/s = n mu / s_m).

On a host (``Problem.host``) only hardware that fits it (``Problem.fits_host``), no stage with more
replicas than its whole cores run at once, and what a plan serves is what the host's cores give too
(``slipstream.planner.cores.served_qps``): when they bind, the configs that spend the least CPU per item
(``Config.cpu_ms_per_item``) serve the most, so of the two choices per stage (the fastest replica,
the least CPU an item) the plan that serves more is taken.

The mode's own failed plan is kept instead when it has stages, fits the cap and serves at least as
much (e.g. milp's last tightening round).

A periodic re-plan replaces the plan being served only when that buys something (:func:`replaces`):
an infeasible one only when the serving plan falls short of the forecast and the new one serves more;
a feasible one only when the serving plan no longer meets the SLO for the forecast, or the new one
costs clearly less (``min_saving``) or, when accuracy is the objective, is more accurate. Every
redeploy loads and warms replicas on the workers' cores and resets the tuner's replicas to the
plan's, so a re-plan that only trades one equally good plan for another is not deployed.
"""
from __future__ import annotations

import logging
import math
from dataclasses import replace

from .capacity import path_transit_ms
from .cores import served_qps
from .plan import Assignment, Plan, evaluate, formation_ms
from .problem import Problem

log = logging.getLogger(__name__)


def allowed_variants(problem: Problem, stage: str, top_only: bool) -> list:
    variants = list(problem.stage(stage).variants)
    if top_only:
        return [max(variants, key=lambda v: v.accuracy)]
    floor = problem.accuracy_floor
    return [v for v in variants if not floor or v.accuracy >= floor] or variants


def _configs(problem: Problem, stage: str, top_only: bool):
    """(variant, hardware, batch, l(b) ms, timeout ms, CPU ms per item) of every config the mode may use."""
    lam = problem.stage_rate(stage)
    for v in allowed_variants(problem, stage, top_only):
        for h, curve in sorted(problem.curves_on_host(stage, v.name).items()):
            for b in problem.batch_sizes_for(curve):
                exec_ms = curve.ms(b)
                yield (v.name, h, b, exec_ms, min(formation_ms(b, lam), exec_ms),
                       problem.hardware[h].host_cores * exec_ms / b)


def highest_capacity(problem: Problem, mode: str, top_only: bool) -> dict[str, tuple[Assignment, ...]]:
    """The assignments of the highest-capacity plan (module docstring)."""
    names = problem.topo_order
    configs = {s: list(_configs(problem, s, top_only)) for s in names}
    if not all(configs.values()):
        return {}  # a stage with no hardware that fits the host
    fastest = {s: min(c[3] for c in configs[s]) for s in names}
    share: dict[str, float] = {}
    for p in problem.paths():
        budget = max(0.0, problem.slo_ms - path_transit_ms(problem, p))
        for s in p:
            share[s] = min(share.get(s, math.inf), budget * fastest[s] / sum(fastest[x] for x in p))
    fits = {s: [c for c in configs[s] if c[3] + c[4] <= share[s]] for s in names}
    quickest = {s: max(fits[s], key=lambda c: (c[2] / c[3], -problem.hardware[c[1]].cost_per_hour, -c[2]))
                if fits[s] else min(configs[s], key=lambda c: (c[2], c[3])) for s in names}
    plans = [_replicated(problem, quickest)]
    if problem.host is not None:
        frugal = {s: min(fits[s], key=lambda c: (c[5], -c[2] / c[3], problem.hardware[c[1]].cost_per_hour))
                  if fits[s] else quickest[s] for s in names}
        plans.append(_replicated(problem, frugal))
    return max(plans, key=lambda a: served_qps(problem, evaluate(problem, mode, a, rate_qps=problem.rate_qps))[0])


def _replicated(problem: Problem, chosen: dict) -> dict[str, tuple[Assignment, ...]]:
    """The chosen config of each stage with replicas for the rate (on a host, no more than its whole
    cores run at once) or, beyond the cluster cap, the cap spread to the stages with the least capacity."""
    names = problem.topo_order
    mu = {s: chosen[s][2] / (chosen[s][3] / 1000.0) for s in names}
    top = {s: problem.max_stage_replicas or math.inf for s in names}
    if problem.host is not None:
        whole = max(1, math.floor(problem.host.cores + 1e-9))
        top = {s: min(top[s], max(1, whole // max(1, problem.hardware[chosen[s][1]].host_cores))) for s in names}
    reps = {s: min(top[s], max(1, math.ceil(problem.stage_rate(s) / mu[s] - 1e-9))) for s in names}
    cap = problem.max_replicas
    if cap is not None and sum(reps.values()) > cap:
        reps = {s: 1 for s in names}
        served = [s for s in names if problem.visit_ratio(s) > 0]
        while sum(reps.values()) < cap and (room := [s for s in served if reps[s] < top[s]]):
            low = min(room, key=lambda s: reps[s] * mu[s] / problem.visit_ratio(s))
            reps[low] += 1
    return {s: (Assignment(chosen[s][0], chosen[s][1], chosen[s][2], reps[s], 1.0, chosen[s][4]),) for s in names}


def within_caps(problem: Problem, plan: Plan) -> bool:
    """Whether ``plan`` keeps to the problem's cluster cap and per-stage cap, on hardware that fits the host."""
    reps = [sp.replicas for sp in plan.stages]
    return ((problem.max_replicas is None or sum(reps) <= problem.max_replicas)
            and (problem.max_stage_replicas is None or max(reps, default=0) <= problem.max_stage_replicas)
            and all(problem.fits_host(a.hardware) for sp in plan.stages for a in sp.assignments))


def serve_anyway(problem: Problem, plan: Plan, *, top_only: bool) -> Plan:
    """``plan`` when it meets the SLO; else the highest-capacity plan (or the mode's own, when it has
    stages, fits the cap and serves as much), flagged infeasible with its capacity and the reason."""
    if plan.feasible:
        return plan
    assigned = highest_capacity(problem, plan.mode, top_only)
    if not assigned:
        return plan  # no stage has hardware that fits the host: nothing to deploy
    best = evaluate(problem, plan.mode, assigned, rate_qps=problem.rate_qps, solve_time_s=plan.solve_time_s)
    cap, neck = served_qps(problem, best)
    if plan.stages and within_caps(problem, plan):
        own, own_neck = served_qps(problem, plan)
        if own >= cap:
            best, cap, neck = plan, own, own_neck
    short = problem.rate_qps - cap
    where = "the host's cores" if neck == "host" else f"stage {neck}"
    said = (f"no {plan.mode} plan meets the SLO ({plan.reason}); deploying the highest-capacity plan: "
            f"{cap:.1f} qps for {problem.rate_qps:.1f} qps"
            + (f", short by {short:.1f} qps at {where}" if short > 0 else ", enough capacity: the SLO is "
               "missed on latency") + "; the workers drop early what cannot meet its deadline")
    log.warning("%s", said)
    return replace(best, feasible=False, reason=plan.reason or best.reason, capacity_qps=cap,
                   notes=(f"infeasible: {said}",) + tuple(n for n in best.notes if not n.startswith("infeasible:")))


MIN_SAVING = 0.10  # a feasible re-plan must cost this share less than a serving plan that still holds


def replaces(problem: Problem, new: Plan, serving: Plan | None, serving_now: Plan | None = None,
             min_saving: float = MIN_SAVING) -> bool:
    """Whether ``new`` should be deployed over ``serving`` (always when nothing is served yet).

    ``serving_now`` is the serving plan judged for ``problem`` by the estimator (its forecast and
    sample; None: not judged, as if it no longer held). A feasible ``new`` replaces it when it no
    longer meets the SLO, or ``new`` costs at least ``min_saving`` less, or, when accuracy comes first
    (the accuracy objective, loki), ``new`` is more accurate. An infeasible ``new`` replaces it only
    when the serving plan falls short of the forecast (``problem.rate_qps``) and ``new`` has more
    capacity: a serving plan that keeps up misses, if at all, on latency, which more replicas do not
    mend (the tuner scales for bursts)."""
    if serving is None or not serving.stages:
        return True
    if new.feasible:
        if serving_now is None or not serving_now.feasible:
            return True
        accuracy_first = problem.objective != "cost" or new.mode == "loki"
        return (new.cost_per_hour < serving_now.cost_per_hour * (1 - min_saving)
                or (accuracy_first and new.accuracy > serving_now.accuracy + 1e-6))
    have = served_qps(problem, serving)[0]
    return have < problem.rate_qps and served_qps(problem, new)[0] > have * (1 + 1e-9)
