"""Model instances of a stage worker: executor copies, each on its own model thread.

A worker runs ``placement.layout(replicas, max_instances).instances`` of them behind its one queue.
Each free instance takes the next window (so the queue is a central queue with c servers); a batch
runs on its instance's thread, one at a time per instance (Clockwork), c at a time per worker.

Scaling is instance work, not group work: a new instance is loaded and warmed on the loader thread
while the running ones keep serving, and joins at the next window boundary; a removed instance
finishes the window it is on and closes. Variants of one (variant set, hardware) share one latency
predictor (same model, same hardware: the same numbers), seeded by the first instance's warm-up.
"""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from slipstream.streams.executor import Executor
from slipstream.streams.heartbeat import Heartbeat
from slipstream.streams.latency import LatencyCurve, RecentLatency
from slipstream.streams.spec import Hardware, Variant

ExecutorFactory = Callable[[Variant, Hardware], Executor]

# A model run's deadline: RUN_DEADLINE_SLOS times the pipeline's SLO, at least RUN_DEADLINE_FLOOR_S
# (a batch that takes ten SLOs answers nothing in time; the floor keeps a tight SLO on a loaded
# machine from calling a slow run hung). Past it the run's requests get error results and the
# instance is replaced (``slipstream.agents.worker``); its thread cannot be stopped, so liveness fails until a
# restart frees it (``slipstream.streams.heartbeat``).
RUN_DEADLINE_SLOS, RUN_DEADLINE_FLOOR_S = 10, 5.0


def run_deadline_s(slo_ms: float) -> float:
    """How long one model run (a batch on an instance's thread) may take before it counts as hung."""
    return max(RUN_DEADLINE_FLOOR_S, RUN_DEADLINE_SLOS * slo_ms / 1000)


class RunPastDeadline(TimeoutError):
    """A model run did not finish within its deadline: its instance is hung (``Instance.hung``)."""


async def run_bounded(inst: "Instance", heartbeat: Heartbeat, deadline_s: float, what: str,
                      fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on ``inst``'s thread, awaited at most ``deadline_s``; past it the instance is
    marked hung and :class:`RunPastDeadline` raised. The wait stays on ``heartbeat`` until the thread
    is really done, so liveness fails while a hung thread holds the instance's copy."""
    token = heartbeat.begin(what, deadline_s)
    run = inst.pool.submit(fn, *args)
    run.add_done_callback(lambda _: heartbeat.end(token))
    try:
        return await asyncio.wait_for(asyncio.wrap_future(run), deadline_s)
    except TimeoutError:
        inst.hung = f"{what} past its deadline of {deadline_s:g} s: instance replaced"
        raise RunPastDeadline(inst.hung) from None


@dataclass
class Instance:
    """One model copy: an executor per variant the config routes to, and the thread that runs them."""

    executors: dict[str, Executor]
    pool: ThreadPoolExecutor
    index: int = 0  # in hop timings as ``<worker>/<index>``: which copy served a request
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
    """What all instances share about a variant: its accuracy and its latency predictor."""

    accuracy: float
    predictor: RecentLatency


@dataclass
class Fleet:
    """The instances of one config, and the per-variant state they share."""

    instances: list[Instance] = field(default_factory=list)
    variants: dict[str, VariantState] = field(default_factory=dict)
    hardware: str | None = None

    def idle(self) -> Instance | None:
        """The free instance that has waited longest (load spreads over all, every copy stays warm)."""
        free = [i for i in self.instances if not i.busy and not i.retired]
        return min(free, key=lambda i: i.last_used_ns) if free else None


def new_instance(factory: ExecutorFactory, variants: Iterable[Variant], hw: Hardware, name: str,
                 index: int) -> Instance:
    """Load one copy of each variant (blocking: call it on the loader thread)."""
    executors: dict[str, Executor] = {}
    try:
        for v in variants:
            executors[v.name] = factory(v, hw)
    except BaseException:
        for ex in executors.values():
            ex.close()
        raise
    return Instance(executors, ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"model-{name}-{index}"),
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
