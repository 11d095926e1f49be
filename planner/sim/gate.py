"""The source stage's admission in the estimator: the workers' own rules (``slipstream.streams.shedding``) on
the simulated arrivals, with the capacity the workers read.

A source worker judges each request when it reads it: expired (it cannot finish at the stage even
served at once, alone) or shed (the leaky bucket of the requests let through, draining at the plan's
capacity in force, would make it wait past its deadline). Here the same :class:`SourceGate` judges
each arrival at the time it is fetchable at the source, in that order, with

- the capacity in force: ``slipstream.streams.control_io.planned_capacity_qps`` of the hand-off record the
  planner publishes for the plan (``handoff``), with each stage's replicas and routing shares in force
  (the plan's, then the schedule's ``ReplicaChange`` and ``ShareChange`` at their times); one gate for
  the stage, at the whole input's rate (one source worker, as the live runs deploy it);
- ``serve_ns``: the source stage's predicted batch-1 latency at the start (the workers' predictor
  starts from the same profile and learns from there).

What the gate refuses never enters the stage's queue; the estimator logs it as dropped at the source
at the time it was judged. Without a hand-off nothing is shed (the workers' own backstop), as live.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ...schemas.records import TunerHandoff
from ...streams.control_io import planned_capacity_qps
from ...streams.shedding import SourceGate
from .params import ReplicaChange, ShareChange

NS_PER_S = 1_000_000_000


@dataclass
class InForce:
    """Replicas and routing shares per stage in force, changed by the schedule at its times."""

    replicas: dict[str, int]
    routing: dict[str, dict[str, float]]
    others: dict[str, list[int]] = field(default_factory=dict)  # per stage: each assignment's replicas

    def apply(self, change: ReplicaChange | ShareChange) -> None:
        if isinstance(change, ShareChange):
            self.routing[change.stage] = dict(change.shares)
        else:
            counts = self.others[change.stage]
            counts[change.index] = change.replicas
            self.replicas[change.stage] = sum(counts)


def capacity_steps(handoff: TunerHandoff, plan, schedule: Sequence) -> tuple[list[int], list[float | None]]:
    """(times ns, capacity qps from then on): the plan's at 0, then after each replica or share change."""
    state = InForce({sp.stage: sp.replicas for sp in plan.stages},
                    {sp.stage: dict(sp.routing or {}) for sp in plan.stages},
                    {sp.stage: [a.replicas for a in sp.assignments] for sp in plan.stages})
    times, caps = [0], [planned_capacity_qps(handoff, state.replicas, state.routing)]
    for c in sorted((c for c in schedule if isinstance(c, (ReplicaChange, ShareChange)) and c.stage in state.replicas),
                    key=lambda c: c.time_s):
        state.apply(c)
        times.append(int(c.time_s * NS_PER_S))
        caps.append(planned_capacity_qps(handoff, state.replicas, state.routing))
    return times, caps


def judge_arrivals(stage: str, visible_ns: np.ndarray, deadline_ns: np.ndarray, serve_ns: int,
                   steps: tuple[list[int], list[float | None]]) -> list[tuple[int, str]]:
    """(request, reason) of every arrival the source gate refuses, judged in the order they are
    fetchable (``visible_ns[i]``: request i's), at the capacity in force then (``steps``)."""
    gate = SourceGate(stage)
    times, caps = steps
    k, refused = 0, []
    for i in np.argsort(visible_ns, kind="stable").tolist():
        now = int(visible_ns[i])
        while k + 1 < len(times) and times[k + 1] <= now:
            k += 1
        gate.rate_qps = caps[k]
        why = gate.judge(int(deadline_ns[i]), now, serve_ns)
        if why is not None:
            refused.append((i, why))
    return refused
