"""``slipstream bench planner``: solver time, estimator speed, and the cost of each mode.

Three measurements, each printed with the machine and commit:

1. MILP solve time on a synthetic 10 stages x 10 variants x 7 batch sizes x 3 hardware problem
   (2,100 configs), median of ``repeats`` solves per solver (HiGHS, CBC).
2. Estimator speed: ``sim_seconds`` of Poisson arrivals at ``sim_rate`` qps through a 4-stage chain
   under the plan milp makes for it; simulated requests (and request-stage visits) per wall second,
   as ``simulate`` runs it by default (stage by stage, ``slipstream.planner.sim.stagewise``) and, on the same
   trace, through the event loop (``method="events"``, what a tuner schedule or a shared host needs).
3. Cost and estimator attainment of milp, loki, inferline, cg-peak and cg-mean on one 4-stage problem:
   ``milp-top`` is milp restricted to each stage's most accurate variant (the variant inferline and
   cg-* use), so its cost compares like for like; planned on a bursty gamma sample trace (CV^2 = ``cv2``), evaluated on a second trace with the same
   statistics (InferLine's separate plan/eval traces), with the cost ratio to cg-peak.
"""
from __future__ import annotations

import platform
import statistics
import subprocess
import time
from dataclasses import dataclass, replace

import numpy as np

from ...planner import milp
from ...planner.estimator import SimOptions, simulate
from ...planner.modes import make_planner
from ...planner.problem import Problem
from ...streams.arrivals import gamma_arrivals, peak_rate_sliding, poisson_arrivals
from ..synthetic import random_problem


@dataclass(frozen=True)
class BenchSettings:
    repeats: int = 5
    sim_seconds: float = 600.0
    sim_rate: float = 300.0
    plan_seconds: float = 30.0
    rate_qps: float = 150.0
    cv2: float = 4.0
    slo_ms: float = 300.0
    seed: int = 7
    modes: tuple[str, ...] = ("milp", "milp-top", "loki", "inferline", "cg-peak", "cg-mean")


@dataclass(frozen=True)
class ModeRow:
    mode: str
    feasible: bool
    cost_per_hour: float
    accuracy: float
    plan_time_s: float
    eval_p99_ms: float
    eval_attainment: float
    cost_vs_cg_peak: float | None
    reason: str


@dataclass(frozen=True)
class BenchResult:
    machine: str
    commit: str
    solve_times: dict[str, list[float]]
    solve_configs: int
    sim_requests: int
    sim_stage_visits: int
    sim_wall_s: float
    sim_cpu_s: float  # this process's CPU seconds in the same run: steadier than wall on a shared machine
    sim_events_wall_s: float
    rows: tuple[ModeRow, ...]

    @property
    def sim_qps(self) -> float:
        return self.sim_requests / self.sim_wall_s


def commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or "uncommitted"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def machine() -> str:
    import os
    return f"{platform.node()} {platform.processor() or platform.machine()} {os.cpu_count()} cpus"


def solve_times(s: BenchSettings) -> tuple[dict[str, list[float]], int]:
    p = random_problem(s.seed, stages=10, variants=10, hardware=3, batch_sizes=(1, 2, 4, 8, 16, 32, 64),
                       rate_qps=300.0, slo_ms=800.0, sim_seconds=1.0)
    n_cfg = sum(len(milp.stage_configs(p, st.name)) for st in p.stages)
    out: dict[str, list[float]] = {}
    for solver in ("highs", "cbc"):
        times = []
        for _ in range(s.repeats):
            plan = milp.solve(p, milp.MilpOptions(solver=solver, time_limit_s=60.0))
            if not plan.feasible:
                raise RuntimeError(f"bench problem infeasible under {solver}: {plan.reason}")
            times.append(plan.solve_time_s)
        out[solver] = times
    return out, n_cfg


def four_stage(s: BenchSettings, rate: float, trace: np.ndarray) -> Problem:
    return random_problem(s.seed, stages=4, variants=3, hardware=3, batch_sizes=(1, 2, 4, 8, 16, 32),
                          rate_qps=rate, slo_ms=s.slo_ms, arrivals_s=trace)


def estimator_speed(s: BenchSettings) -> tuple[int, int, float, float, float]:
    """(requests, request-stage visits, wall s and CPU s by default, wall s through the event loop)."""
    trace = poisson_arrivals(s.sim_rate, s.sim_seconds, s.seed)
    p = four_stage(s, s.sim_rate, trace[trace < 30.0])
    plan = make_planner("milp").plan(p)
    walls, cpus = [], []
    for method in ("auto", "events"):
        t0, c0 = time.perf_counter(), time.process_time()
        res = simulate(replace(p, arrivals_s=trace), plan, SimOptions(method=method))
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    visits = int(np.sum(~np.isnan(res.stage_ms)))
    return res.requests, visits, walls[0], cpus[0], walls[1]


def top_variants_only(p: Problem) -> Problem:
    stages = tuple(replace(st, variants=(max(st.variants, key=lambda v: v.accuracy),)) for st in p.stages)
    return replace(p, stages=stages)


def compare_modes(s: BenchSettings) -> tuple[ModeRow, ...]:
    plan_trace = gamma_arrivals(s.rate_qps, s.cv2, s.plan_seconds, np.random.default_rng(s.seed))
    eval_trace = gamma_arrivals(s.rate_qps, s.cv2, s.plan_seconds, np.random.default_rng(s.seed + 1))
    p = four_stage(s, s.rate_qps, plan_trace)
    # the planning rate for the analytical modes: the sample's peak 1-s rate
    p = replace(p, rate_qps=peak_rate_sliding(plan_trace, 1.0))
    rows = []
    for mode in s.modes:
        t0 = time.perf_counter()
        if mode == "milp-top":  # milp restricted to each stage's most accurate variant, as the others use
            plan = replace(make_planner("milp").plan(top_variants_only(p)), mode=mode)
        else:
            plan = make_planner(mode).plan(p)
        dt = time.perf_counter() - t0
        if plan.stages:
            ev = simulate(replace(p, arrivals_s=eval_trace, seed=s.seed + 1), plan)
            p99, att = ev.p99_ms, ev.attainment
        else:
            p99, att = float("nan"), 0.0
        rows.append(ModeRow(mode, plan.feasible, plan.cost_per_hour, plan.accuracy, dt, p99, att, None, plan.reason))
    base = next((r.cost_per_hour for r in rows if r.mode == "cg-peak" and r.cost_per_hour > 0), None)
    return tuple(replace(r, cost_vs_cg_peak=(r.cost_per_hour / base if base else None)) for r in rows)


def run(s: BenchSettings = BenchSettings()) -> BenchResult:
    times, n_cfg = solve_times(s)
    n_req, visits, wall, cpu, events_wall = estimator_speed(s)
    rows = compare_modes(s)
    return BenchResult(machine(), commit(), times, n_cfg, n_req, visits, wall, cpu, events_wall, rows)


def render(r: BenchResult, s: BenchSettings) -> None:
    from rich.console import Console
    from rich.table import Table
    con = Console()
    con.print(f"[bold]slipstream bench planner[/] commit {r.commit} on {r.machine}")
    t = Table(title=f"MILP solve time, 10 stages x 10 variants x 7 batch sizes x 3 hardware ({r.solve_configs} configs)")
    for col in ("solver", "median s", "min s", "max s", "solves", "goal"):
        t.add_column(col)
    for solver, ts in r.solve_times.items():
        med = statistics.median(ts)
        t.add_row(solver, f"{med:.3f}", f"{min(ts):.3f}", f"{max(ts):.3f}", str(len(ts)),
                  f"{med / 1.0:.2f}x of 1 s")
    con.print(t)
    con.print(f"estimator: {r.sim_requests:,} requests ({r.sim_stage_visits:,} request-stage visits) of "
              f"{s.sim_seconds:.0f} s at {s.sim_rate:.0f} qps through 4 stages in {r.sim_wall_s:.2f} s "
              f"({r.sim_cpu_s:.2f} s CPU) = "
              f"{r.sim_qps:,.0f} requests/s, {r.sim_stage_visits / r.sim_wall_s:,.0f} visits/s; "
              f"an hour at 300 qps would take ~{300 * 3600 / r.sim_qps:.1f} s (goal 3 s); "
              f"through the event loop {r.sim_events_wall_s:.2f} s "
              f"({r.sim_events_wall_s / r.sim_wall_s:.1f}x)")
    t = Table(title=f"modes on a 4-stage problem, gamma CV^2={s.cv2} at {s.rate_qps:.0f} qps, SLO {s.slo_ms:.0f} ms "
                    f"(planned on one {s.plan_seconds:.0f}-s trace, evaluated on another)")
    for col in ("mode", "feasible", "$/h", "cost / cg-peak", "accuracy", "eval p99 ms", "p99 / SLO",
                "eval attainment", "plan time s"):
        t.add_column(col)
    for row in r.rows:
        ratio = "-" if row.cost_vs_cg_peak is None else f"{row.cost_vs_cg_peak:.2f}"
        t.add_row(row.mode, "yes" if row.feasible else f"no: {row.reason[:40]}", f"{row.cost_per_hour:.3f}", ratio,
                  f"{row.accuracy:.3f}", f"{row.eval_p99_ms:.1f}", f"{row.eval_p99_ms / s.slo_ms:.2f}",
                  f"{row.eval_attainment:.4f}", f"{row.plan_time_s:.2f}")
    con.print(t)
