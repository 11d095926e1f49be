"""Where batches run: at full speed (:class:`Dedicated`), or sharing a host's cores (:class:`SharedHost`).

A server hands a batch's work (ns of run time at full speed) to ``host.run(job, work_ns, now, key)``;
the host calls ``job.fire(finish_ns, None)`` when the batch is done (batches done at the same instant
in the order of their completion ``key``).

:class:`SharedHost` is exact processor sharing: while k batches run, each progresses at
``HostModel.rate(k) = min(1, free cores / k)``. All running batches share one rate, so the host keeps
a virtual clock ``v`` (work done by any batch running since ``v`` started): a batch started at
``v0`` with work w finishes when ``v`` reaches ``v0 + w``. Running batches wait in a heap on that
target; when k changes the clock is advanced at the old rate and only the next completion is
rescheduled (stale completions are recognised by a version), so a change of k costs O(log k).
"""
from __future__ import annotations

import heapq
import itertools
import math

from planner.sim.engine import DONE, Engine, Target
from planner.sim.params import HostModel

_EPS = 0.5  # ns of work: completions closer than this are simultaneous (float rounding of v)


class Dedicated:
    """No sharing: a batch takes exactly its work."""

    __slots__ = ("engine",)

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def run(self, job: Target, work_ns: int, now: int, key: int) -> None:
        self.engine.at(now + work_ns, DONE, job, None, key)


class SharedHost:
    """Processor sharing over ``model.free_cores`` (see the module docstring)."""

    __slots__ = ("engine", "model", "jobs", "v", "t", "version", "_seq")

    def __init__(self, engine: Engine, model: HostModel) -> None:
        self.engine = engine
        self.model = model
        self.jobs: list[tuple[float, int, int, Target]] = []  # (virtual finish, key, seq, job)
        self.v = 0.0
        self.t = 0
        self.version = 0
        self._seq = itertools.count().__next__

    def run(self, job: Target, work_ns: int, now: int, key: int) -> None:
        self._advance(now)
        heapq.heappush(self.jobs, (self.v + work_ns, key, self._seq(), job))
        self._reschedule(now)

    def fire(self, now: int, version: object) -> None:
        if version != self.version:
            return
        self._advance(now)
        done = []
        jobs = self.jobs
        while jobs and jobs[0][0] <= self.v + _EPS:
            done.append(heapq.heappop(jobs)[1:])
        self._reschedule(now)
        for _, _, job in sorted(done, key=lambda d: d[:2]):
            job.fire(now, None)

    def _advance(self, now: int) -> None:
        if self.jobs:
            self.v += (now - self.t) * self.model.rate(len(self.jobs))
        self.t = now

    def _reschedule(self, now: int) -> None:
        self.version += 1
        if self.jobs:
            left = (self.jobs[0][0] - self.v) / self.model.rate(len(self.jobs))
            self.engine.at(now + max(0, math.ceil(left - 1e-6)), DONE, self, self.version)
