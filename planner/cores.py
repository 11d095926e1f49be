"""What a plan asks of the host's cores, and what the host can serve of it (docs/planner.md, "The
host").

A problem with a host (``Problem.host``, a ``HostModel``: declared, or a calibration's) shares its
cores between the plan's replicas and the co-located processes: the broker, the load generator, the
gateway and the control plane (``background_cores`` whatever the rate, ``request_cpu_ms`` per
request), and the workers' own work per window (``window_cpu_ms``, counted at windows of one item:
once per stage a request visits, ``HostModel.per_request_ms``). At pipeline rate r a plan keeps busy

    r x sum over stages of visit_ratio x CPU ms per item / 1000   (the replicas: ``Config.cpu_ms_per_item``,
                                                                   threads x l(b) / b on CPU hardware)
  + background_cores + r x (request_cpu_ms                         (the co-located processes
                            + sum of visit ratios x window_cpu_ms) / 1000     and the workers' windows)

and no mode plans what keeps more busy than the host has at the problem's rate (:func:`host_excess`,
the estimator check's first step; the MILP has it as a constraint; a tightening round's higher
planning rate buys capacity, not arrivals), nor hardware with more threads than the host's cores
(``Problem.fits_host``). The rate at which the cores run out (:func:`host_qps`) bounds what a plan
serves whatever its replicas (:func:`served_qps`): past it more replicas only share the same cores.
Without a host every figure here is unbounded.
"""
from __future__ import annotations

import math

from .capacity import capacity_qps, item_cpu_ms
from .plan import Plan, config_of
from .problem import Problem


def cpu_ms_per_request(problem: Problem, plan: Plan) -> float:
    """Host CPU ms the plan's replicas spend on one pipeline request (each stage's assignments by
    their share of its items)."""
    return sum(problem.visit_ratio(sp.stage) * item_cpu_ms(problem, sp) for sp in plan.stages)


def cores_busy(problem: Problem, plan: Plan, rate_qps: float) -> tuple[float, float]:
    """(cores the replicas keep busy, cores the co-located processes keep busy) at ``rate_qps``."""
    if problem.host is None:
        return 0.0, 0.0
    return rate_qps * cpu_ms_per_request(problem, plan) / 1000.0, problem.colocated_cores(rate_qps)


def host_qps(problem: Problem, plan: Plan) -> float:
    """The pipeline rate at which the replicas and the co-located processes keep all the host's free
    cores busy (inf without a host or when nothing takes CPU per request)."""
    host = problem.host
    if host is None:
        return math.inf
    per_request = cpu_ms_per_request(problem, plan) + host.per_request_ms(problem.windows_per_request())
    return host.free_cores / (per_request / 1000.0) if per_request > 0 else math.inf


def host_excess(problem: Problem, plan: Plan, rate_qps: float | None = None) -> str:
    """Why ``plan`` oversubscribes the host at ``rate_qps`` (default the problem's: the rate requests
    arrive at; a tightening round plans for more to buy capacity, not arrivals), "" when it does not
    (or there is no host)."""
    host = problem.host
    if host is None:
        return ""
    wide = sorted({a.hardware for sp in plan.stages for a in sp.assignments if not problem.fits_host(a.hardware)})
    if wide:
        return (f"host: hardware {wide} has more threads than the {host.cores:g} cores "
                f"({host.background_cores:g} taken by other work) leave")
    rate = problem.rate_qps if rate_qps is None else rate_qps
    models, others = cores_busy(problem, plan, rate)
    if models + others > host.cores + 1e-9:
        return (f"host: at {rate:.1f} qps the replicas keep {models:.2f} cores busy and the co-located "
                f"processes {others:.2f}, more than the host's {host.cores:g}; it serves at most "
                f"{host_qps(problem, plan):.1f} qps")
    return ""


def served_qps(problem: Problem, plan: Plan) -> tuple[float, str]:
    """What the plan serves on its host: its replicas' capacity (``capacity_qps``) or, when the cores
    run out first, :func:`host_qps`; with the bottleneck (a stage, or "host")."""
    cap, neck = capacity_qps(problem, plan)
    if not plan.stages:
        return cap, neck
    on_host = host_qps(problem, plan)
    return (on_host, "host") if on_host < cap else (cap, neck)
