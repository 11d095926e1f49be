"""Replicas of a stage worker: each one loaded model (an executor per variant) on its own model thread.

A worker runs ``placement.layout(replicas, max_replicas).per_worker`` of them behind its one queue.
Each free replica takes the next window (so the queue is a central queue with c servers); a batch
runs on its replica's thread, one at a time per replica (Clockwork), c at a time per worker.

Scaling is replica work, not group work: a new replica is loaded and warmed on the loader thread
while the running ones keep serving, and joins at the next window boundary; a removed replica
finishes the window it is on and closes. Variants of one (variant set, hardware) share one latency
predictor (same model, same hardware: the same numbers), seeded by the first replica's warm-up.
"""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ..streams.executor import Executor
from ..streams.heartbeat import Heartbeat
from ..streams.latency import LatencyCurve, RecentLatency
from ..streams.spec import Hardware, Variant

ExecutorFactory = Callable[[Variant, Hardware], Executor]

# A model run's deadline: RUN_DEADLINE_SLOS times the pipeline's SLO, at least RUN_DEADLINE_FLOOR_S
# (a batch that takes ten SLOs answers nothing in time; the floor keeps a tight SLO on a loaded
# machine from calling a slow run hung). Past it the run's requests get error results and the
# replica is replaced (``slipstream.agents.stage.config_switch``); its thread cannot be stopped, so liveness fails until a
# restart frees it (``slipstream.streams.heartbeat``).
RUN_DEADLINE_SLOS, RUN_DEADLINE_FLOOR_S = 10, 5.0


def run_deadline_s(slo_ms: float) -> float:
    """How long one model run (a batch on a replica's thread) may take before it counts as hung."""
    return max(RUN_DEADLINE_FLOOR_S, RUN_DEADLINE_SLOS * slo_ms / 1000)


class RunPastDeadline(TimeoutError):
    """A model run did not finish within its deadline: its replica is hung (``Replica.hung``)."""


async def run_bounded(replica: "Replica", heartbeat: Heartbeat, deadline_s: float, what: str,
                      fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on ``replica``'s thread, awaited at most ``deadline_s``; past it the replica is
    marked hung and :class:`RunPastDeadline` raised. The wait stays on ``heartbeat`` until the thread
    is really done, so liveness fails while a hung thread holds the replica."""
    token = heartbeat.begin(what, deadline_s)
    run = replica.pool.submit(fn, *args)
    run.add_done_callback(lambda _: heartbeat.end(token))
    try:
        return await asyncio.wait_for(asyncio.wrap_future(run), deadline_s)
    except TimeoutError:
        replica.hung = f"{what} past its deadline of {deadline_s:g} s: replica replaced"
        raise RunPastDeadline(replica.hung) from None


@dataclass
class Replica:
    """One model replica: an executor per variant the config names, and the thread that runs them."""

    executors: dict[str, Executor]
    pool: ThreadPoolExecutor
    index: int = 0  # in hop timings as ``<worker>/<index>``: which replica served a request
    busy: bool = False
    last_used_ns: int = 0
    retired: bool = False
    hung: str | None = None  # why its thread is lost (a run past its deadline): it takes no more work

    def close(self) -> None:
        self.pool.shutdown(wait=False)
        for ex in self.executors.values():
            ex.close()

    def retire(self) -> None:
        """Close now if idle, else when the window it is on ends (see :meth:`release`)."""
        self.retired = True
        if not self.busy:
            self.close()

    def release(self) -> None:
        self.busy = False
        self.last_used_ns = time.time_ns()
        if self.retired:
            self.close()


@dataclass
class VariantState:
    """What all replicas share about a variant: its accuracy and its latency predictor."""

    accuracy: float
    predictor: RecentLatency


@dataclass
class Fleet:
    """The replicas of one config, and the per-variant state they share."""

    replicas: list[Replica] = field(default_factory=list)
    variants: dict[str, VariantState] = field(default_factory=dict)
    hardware: str | None = None

    def idle(self) -> Replica | None:
        """The free replica that has waited longest (load spreads over all, every one stays warm)."""
        free = [r for r in self.replicas if not r.busy and not r.retired]
        return min(free, key=lambda r: r.last_used_ns) if free else None


def new_replica(factory: ExecutorFactory, variants: Iterable[Variant], hw: Hardware, name: str,
                index: int) -> Replica:
    """Load one replica: an executor of each variant (blocking: call it on the loader thread)."""
    executors: dict[str, Executor] = {}
    try:
        for v in variants:
            executors[v.name] = factory(v, hw)
    except BaseException:
        for ex in executors.values():
            ex.close()
        raise
    return Replica(executors, ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"model-{name}-{index}"),
                   index)


def warmup_curve(ex: Executor, sizes: tuple[int, ...], reps: int = 3) -> LatencyCurve:
    """Run the example payload at each size a few times; the worst of the repetitions after the
    first seeds the worker's latency predictor when no profile is given."""
    payload = ex.example_payload()
    points = {}
    for b in sorted(set(sizes)):
        times = []
        for _ in range(reps + 1):
            t0 = time.perf_counter()
            ex.run([payload] * b)
            times.append((time.perf_counter() - t0) * 1000)
        points[b] = max(times[1:])
    return LatencyCurve.fit(points)
