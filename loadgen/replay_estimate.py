"""The estimator on the run that happened, for a like-for-like check of its p99.

The planner's "predicted p99" is the estimator on the planning sample at the planning rate. A live
run differs: its own arrivals, and the replica changes the tuner made. This module replays exactly
those through the plan (``planner.estimator.simulate``) and sets the figures side by side, end to end
and per stage (the same definition on both sides: drops count as infinitely late, nearest rank).

- arrivals: every result's ``created_ns``, from the first;
- replica changes: where the run's replica series changes (``loadgen.report.scale_events``), as
  the estimator's ``ReplicaChange`` of the stage's primary assignment;
- per stage, measured residence is a hop's ``finished_ns - enqueued_ns`` (Kafka transit in, queue,
  batch and service), the longest over the request's items at that stage, as the estimator reports it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from loadgen.report import Summary, scale_events
from planner.estimator import ReplicaChange, SimResult, simulate
from planner.plan import Plan
from planner.problem import Problem
from planner.results import nearest_rank

NS = 1_000_000_000


@dataclass(frozen=True)
class StageCompare:
    stage: str
    measured_ms: tuple[float, float]  # p50, p99 of residence
    estimated_ms: tuple[float, float]


@dataclass(frozen=True)
class LikeForLike:
    measured_p99_ms: float
    estimated_p99_ms: float
    measured_attainment: float
    estimated_attainment: float
    stages: tuple[StageCompare, ...]

    @property
    def ratio(self) -> float:
        """estimated / measured p99 (1 is exact)."""
        return self.estimated_p99_ms / self.measured_p99_ms if self.measured_p99_ms > 0 else math.nan

    @property
    def error(self) -> float:
        """|estimated - measured| / measured."""
        return abs(self.ratio - 1.0)


def run_arrivals(results: Sequence[Mapping[str, Any]]) -> np.ndarray:
    created = np.sort(np.array([r["created_ns"] for r in results], dtype=np.int64))
    return (created - created[0]) / NS if created.size else np.empty(0)


def run_changes(summary: Summary, plan: Plan) -> list[ReplicaChange]:
    """The run's replica changes, on each stage's primary assignment (other assignments keep theirs)."""
    out = []
    for t, stage, _before, after in scale_events(summary):
        sp = plan.stage(stage)
        others = sp.replicas - sp.primary.replicas
        out.append(ReplicaChange(t, stage, max(1, after - others), sp.assignments.index(sp.primary)))
    return out


def measured_residence_ms(results: Sequence[Mapping[str, Any]], stage: str) -> np.ndarray:
    """Per request that reached ``stage``: its longest hop residence there (drops at it: infinite)."""
    out = []
    for r in results:
        hops = [h for h in r.get("hops", ()) if h["stage"] == stage]
        if hops:
            out.append(max(h["finished_ns"] - h["enqueued_ns"] for h in hops) / 1e6)
        elif r["status"] == "dropped" and f"{stage}:" in r.get("reason", ""):
            out.append(math.inf)
    return np.asarray(out, dtype=float)


def compare(summary: Summary, results: Sequence[Mapping[str, Any]], sim: SimResult) -> LikeForLike:
    stages = []
    for i, name in enumerate(sim.stage_names):
        m = measured_residence_ms(results, name)
        e = sim.stage_ms[:, i]
        e = np.where(np.isnan(e), -1.0, e)
        e = e[e >= 0]
        stages.append(StageCompare(name, (nearest_rank(m, 50), nearest_rank(m, 99)),
                                   (nearest_rank(e, 50), nearest_rank(e, 99))))
    return LikeForLike(summary.latency.p99_ms, sim.p99_ms, summary.attainment, sim.attainment, tuple(stages))


def estimate_run(problem: Problem, plan: Plan, summary: Summary, results: Sequence[Mapping[str, Any]], *,
                 seed: int = 0, **sim_options: Any) -> LikeForLike:
    """The estimator on this run's arrivals and replica changes, against what was measured."""
    sim = simulate(problem, plan, run_arrivals(results), seed=seed, schedule=tuple(run_changes(summary, plan)),
                   **sim_options)
    return compare(summary, results, sim)


def format_like_for_like(x: LikeForLike) -> str:
    head = f"{'(drops = late)':<22}{'measured':>12}{'estimator':>12}{'ratio':>8}"
    lines = [head, f"{'end-to-end p99 ms':<22}{x.measured_p99_ms:>12.1f}{x.estimated_p99_ms:>12.1f}{x.ratio:>8.2f}",
             f"{'SLO attainment':<22}{100 * x.measured_attainment:>11.2f}%{100 * x.estimated_attainment:>11.2f}%"]
    for s in x.stages:
        for k, q in ((0, "p50"), (1, "p99")):
            m, e = s.measured_ms[k], s.estimated_ms[k]
            r = e / m if m > 0 and math.isfinite(m) else math.nan
            lines.append(f"{s.stage + ' residence ' + q:<22}{m:>12.1f}{e:>12.1f}{r:>8.2f}")
    return "\n".join(lines)
