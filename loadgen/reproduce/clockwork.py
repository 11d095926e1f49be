"""Clockwork (OSDI '20) in the simulator: its Fig. 5, goodput and SLO attainment against the SLO
(10-500 ms) for 15 copies of ResNet50 on one GPU, with and without early drops.

The GPU is one replica of a mixed stage whose variants are the copies (``copy00`` .. ``copy14``),
each request routed to a copy by its id (``slipstream.streams.shares``, the workers' rule) in equal shares: a
window is split by copy and each copy's items run as their own batches, one after the other, as
Clockwork runs one model's batch at a time with no batching across copies. The batching and drop
decisions are the agents' own (``slipstream.streams.batching``: a window is taken as soon as the replica is idle,
``decide`` drops what cannot meet its deadline even alone and runs the largest prefix that meets the
earliest deadline); "without early drops" is the estimator's ``drop_late=False`` (every item runs,
late or not), what a system without Clockwork's early rejection does.

The profile is the paper's own: Table 1's ResNet50 batch latencies on a V100 (TVM), batches 1-16, run
deterministically (Clockwork's premise). It is the paper's input, not its result, so this experiment
needs no research data. Load: open-loop Poisson at 1000 r/s in total (Clockwork's clients were
closed-loop, 16 per model, which keeps the GPU saturated: batch-16 throughput is 1021 r/s).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ...planner.estimator import SimOptions, simulate
from ...planner.plan import Assignment, Plan, StagePlan
from ...planner.problem import HardwareOption, Problem, StageOption, VariantOption
from ...streams.arrivals import poisson_arrivals
from ...streams.latency import LatencyCurve
from . import Reproduction, Row
from .paper_vs_ours import note_if_apart, pct

RESNET50_V100_MS = {1: 2.61, 2: 3.78, 4: 5.61, 8: 9.13, 16: 15.67}  # Clockwork Table 1
V100_PER_HOUR = 3.06  # a p3.2xlarge on demand; the cost does not enter this experiment
COPIES = 15
RATE = 1000.0
SECONDS = 6.0
SLOS_MS = (10.0, 15.0, 25.0, 50.0, 100.0, 250.0, 500.0)
PAPER_GOODPUT_500 = 800.0  # Fig. 5: Clockwork and INFaaS reach about 800 r/s at a 500 ms SLO
PAPER_LATENCY_500 = 300.0  # Fig. 5: "at 500 ms Clockwork's latency is about 300 ms" (15 x batch-16)


@dataclass(frozen=True)
class Point:
    slo_ms: float
    early_drops: bool
    offered_rps: float
    goodput_rps: float  # answered within the SLO, per second
    attainment: float  # goodput / offered (Clockwork's "workload satisfaction")
    dropped: float  # share of requests dropped early
    p99_done_ms: float  # p99 latency of the requests answered (late ones included)


def copies_problem(slo_ms: float, copies: int = COPIES, profile: dict[int, float] = RESNET50_V100_MS) -> Problem:
    curve = LatencyCurve.fit(profile)
    variants = tuple(VariantOption(f"copy{k:02d}", 1.0, {"v100": curve}) for k in range(copies))
    return Problem(slo_ms=slo_ms, rate_qps=RATE, hardware={"v100": HardwareOption("v100", V100_PER_HOUR, "cuda")},
                   stages=(StageOption("model", variants),), batch_sizes=tuple(sorted(profile)), name="clockwork")


def one_gpu_plan(problem: Problem) -> Plan:
    """One replica (the GPU) serving every copy in equal shares; a window holds up to a batch of 16
    per copy (at most 255, the simulator's bound) and is taken as soon as the replica is idle."""
    variants = problem.stage("model").variants
    window = min(255, max(problem.batch_sizes) * len(variants))
    assigns = tuple(Assignment(v.name, "v100", window, 1 if k == 0 else 0, 1.0 / len(variants), 0.0)
                    for k, v in enumerate(variants))
    return Plan("clockwork", (StagePlan("model", assigns),), True,
                cost_per_hour=problem.hardware["v100"].cost_per_hour)


def slo_sweep(slos_ms: Sequence[float], *, copies: int = COPIES, rate: float = RATE, seconds: float = SECONDS,
              progress: Callable[[str], None] = print, seed: int = 0) -> list[Point]:
    arrivals = poisson_arrivals(rate, seconds, np.random.default_rng(seed))
    offered = arrivals.size / seconds
    out = []
    for slo in slos_ms:
        problem = copies_problem(slo, copies)
        plan = one_gpu_plan(problem)
        for drops in (True, False):
            t0 = time.perf_counter()
            sim = simulate(replace(problem, arrivals_s=arrivals), plan, SimOptions(drop_late=drops))
            good = sim.attainment * arrivals.size / seconds
            done = sim.latency_ms[~sim.dropped]
            p99 = float(np.percentile(done, 99)) if done.size else math.nan
            out.append(Point(slo, drops, offered, good, sim.attainment, sim.drop_rate, p99))
            progress(f"SLO {slo:g} ms, early drops {'on' if drops else 'off'}: goodput {good:.0f} r/s, "
                     f"attainment {100 * sim.attainment:.2f} % ({time.perf_counter() - t0:.1f} s)")
    return out


def rows(points: Sequence[Point]) -> list[Row]:
    by = {(p.slo_ms, p.early_drops): p for p in points}
    top = max(p.slo_ms for p in points)
    tight = [s for s in sorted({p.slo_ms for p in points}) if s <= 100]
    out = []
    g = by[(top, True)].goodput_rps
    out.append(Row("Fig. 5", f"goodput at a {top:g} ms SLO, {COPIES} ResNet50 copies, one GPU", f"~{PAPER_GOODPUT_500:g} r/s",
                   f"{g:.0f} r/s (offered {by[(top, True)].offered_rps:.0f})",
                   note_if_apart(PAPER_GOODPUT_500, g, "open-loop offered load vs their closed-loop clients")))
    lat = by[(top, True)].p99_done_ms
    out.append(Row("Fig. 5", f"p99 latency at a {top:g} ms SLO", f"~{PAPER_LATENCY_500:g} ms (15 x batch 16 round robin)",
                   f"{lat:.0f} ms", note_if_apart(PAPER_LATENCY_500, lat, "a window holds what queued, not a full "
                                                  "batch of 16 per copy; the load sets the batch")))
    for s in tight:
        on, off = by[(s, True)], by[(s, False)]
        out.append(Row("Fig. 5", f"goodput at a {s:g} ms SLO, early drops on / off",
                       "Clockwork keeps serving below 100 ms; systems without early rejection collapse",
                       f"{on.goodput_rps:.0f} / {off.goodput_rps:.0f} r/s ({pct(on.attainment)} / {pct(off.attainment)})"))
    return out


def plot(points: Sequence[Point], path: Path) -> Path:
    from ..plots import plt, save

    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for drops, label in ((True, "early drops (Clockwork)"), (False, "no early drops")):
        ps = sorted((p for p in points if p.early_drops == drops), key=lambda p: p.slo_ms)
        ax.plot([p.slo_ms for p in ps], [p.goodput_rps for p in ps], marker="o", label=label)
        ax2.plot([p.slo_ms for p in ps], [100 * p.attainment for p in ps], marker="o", label=label)
    ax.axhline(points[0].offered_rps, color="gray", ls=":", lw=1, label="offered")
    ax.set_ylabel("goodput (r/s within the SLO)")
    ax.set_title(f"Clockwork Fig. 5 in the simulator: {COPIES} ResNet50 copies on one V100 (Table 1 profile), "
                 f"Poisson {RATE:g} r/s", fontsize="small")
    ax.legend(fontsize="small")
    ax2.set_ylabel("SLO attainment (%)")
    ax2.set_xlabel("SLO (ms)")
    ax2.set_xscale("log")
    for a in (ax, ax2):
        a.grid(alpha=0.3, which="both")
    return save(fig, path)


def run(data_dir: Path | None, out_dir: Path, progress: Callable[[str], None]) -> Reproduction:
    """Needs no research data (the profile is the paper's Table 1); ``data_dir`` is not read."""
    points = slo_sweep(SLOS_MS, progress=progress)
    return Reproduction("Clockwork", rows=rows(points), plots=[plot(points, out_dir / "clockwork-fig5.png")])
