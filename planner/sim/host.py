"""Where batches run: at full speed (:class:`Dedicated`), or sharing a host's cores (:class:`SharedHost`)
with each other, with the co-located processes' work per request (:class:`Colocated`) and with the
workers' own work per window (:class:`Windows`).

A server hands a batch's work (ns of run time at full speed) to ``host.run(job, work_ns, now, key,
demand)`` (``demand``: the cores it keeps busy, its hardware's threads); the host calls
``job.fire(finish_ns, None)`` when the batch is done (batches done at the same instant in the order of
their completion ``key``).

:class:`SharedHost` is exact processor sharing: while the running work demands D cores in all, each
piece progresses at ``HostModel.rate(D) = min(1, free cores / D)``. All running work shares one rate,
so the host keeps a virtual clock ``v`` (work done by any piece running since ``v`` started): a piece
started at ``v0`` with work w finishes when ``v`` reaches ``v0 + w``. Running work waits in a heap on
that target; when D changes the clock is advanced at the old rate and only the next completion is
rescheduled (stale completions are recognised by a version), so a change of D costs O(log k).
"""
from __future__ import annotations

import heapq
import itertools
import math

from .engine import CHANGE, DONE, Engine, Target
from .params import HostModel

_EPS = 0.5  # ns of work: completions closer than this are simultaneous (float rounding of v)
_ARRIVAL = object()  # Colocated's token: a request arrives (None: its work is done)


class Dedicated:
    """No sharing: a batch takes exactly its work."""

    __slots__ = ("engine",)

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def run(self, job: Target, work_ns: int, now: int, key: int, demand: int = 1) -> None:
        self.engine.at(now + work_ns, DONE, job, None, key)


class SharedHost:
    """Processor sharing over ``model.free_cores`` (see the module docstring)."""

    __slots__ = ("engine", "model", "jobs", "demand", "v", "t", "version", "_seq")

    def __init__(self, engine: Engine, model: HostModel) -> None:
        self.engine = engine
        self.model = model
        self.jobs: list[tuple[float, int, int, Target, int]] = []  # (virtual finish, key, seq, job, demand)
        self.demand = 0  # cores the running work asks for
        self.v = 0.0
        self.t = 0
        self.version = 0
        self._seq = itertools.count().__next__

    def run(self, job: Target, work_ns: int, now: int, key: int, demand: int = 1) -> None:
        self._advance(now)
        heapq.heappush(self.jobs, (self.v + work_ns, key, self._seq(), job, demand))
        self.demand += demand
        self._reschedule(now)

    def fire(self, now: int, version: object) -> None:
        if version != self.version:
            return
        self._advance(now)
        done = []
        jobs = self.jobs
        while jobs and jobs[0][0] <= self.v + _EPS:
            done.append(heapq.heappop(jobs)[1:])
            self.demand -= done[-1][3]
        self._reschedule(now)
        for _, _, job, _ in sorted(done, key=lambda d: d[:2]):
            job.fire(now, None)

    def _advance(self, now: int) -> None:
        if self.jobs:
            self.v += (now - self.t) * self.model.rate(self.demand)
        self.t = now

    def _reschedule(self, now: int) -> None:
        self.version += 1
        if self.jobs:
            left = (self.jobs[0][0] - self.v) / self.model.rate(self.demand)
            self.engine.at(now + max(0, math.ceil(left - 1e-6)), DONE, self, self.version)


class Windows:
    """The workers' own work per window (``HostModel.window_cpu_ms``): one core's work on the shared
    host each time a stage's server takes a window (:meth:`taken`), whatever it holds; nothing waits
    on it."""

    __slots__ = ("host", "work_ns")

    def __init__(self, host: SharedHost) -> None:
        self.host = host
        self.work_ns = int(round(host.model.window_cpu_ms * 1_000_000))

    def taken(self, now: int) -> None:
        self.host.run(self, self.work_ns, now, -1)

    def fire(self, now: int, token: object) -> None:
        return  # a window's own work is done: nothing waits on it


class Colocated:
    """The per-request work beyond the models': ``HostModel.request_cpu_ms`` of one core's work on the
    shared host at the arrival of each request it is given (the admitted ones), one arrival scheduled
    at a time."""

    __slots__ = ("engine", "host", "arrivals", "work_ns", "i")

    def __init__(self, engine: Engine, host: SharedHost, arrivals_ns: list[int]) -> None:
        self.engine, self.host, self.arrivals, self.i = engine, host, arrivals_ns, 0
        self.work_ns = int(round(host.model.request_cpu_ms * 1_000_000))
        if arrivals_ns:
            engine.at(arrivals_ns[0], CHANGE, self, _ARRIVAL)

    def fire(self, now: int, token: object) -> None:
        if token is not _ARRIVAL:
            return  # a request's co-located work is done: nothing waits on it
        self.host.run(self, self.work_ns, now, -1)
        self.i += 1
        if self.i < len(self.arrivals):
            self.engine.at(self.arrivals[self.i], CHANGE, self, _ARRIVAL)

