"""Liveness from heartbeats: is this process still doing its work, or only still running?

``/healthz`` (``slipstream.streams.metrics_http``) is answered by the HTTP thread, which runs as long as the
process does; a hung event loop or a hung model thread would not show there. :class:`Heartbeat`
collects what does show it, and :meth:`Heartbeat.problem` (called from the HTTP thread) names the
first thing wrong, so ``/healthz`` answers 503 with it and Kubernetes restarts the process:

- the event loop's tick (:meth:`Heartbeat.beat`, a task that ticks every ``TICK_S``): not ticked
  for ``loop_stall_s``, the loop is stuck (a blocking call, an endless computation);
- each bounded wait in progress (:meth:`Heartbeat.begin` with its deadline, :meth:`Heartbeat.end`
  when it is over): a model run on its thread past its deadline is hung (a thread cannot be
  stopped: only a restart frees it);
- a condition only a restart clears (:meth:`Heartbeat.fail`: outputs that could be neither written
  nor replaced and were left unacked to be read again).

Every method is safe from any thread (one lock, held for a few dictionary operations).
"""
from __future__ import annotations

import asyncio
import itertools
import threading
import time

TICK_S = 1.0
LOOP_STALL_S = 15.0  # several ticks: a long GC pause or a slow fetch hand-off is not a hang


class Heartbeat:
    def __init__(self, loop_stall_s: float = LOOP_STALL_S, clock=time.monotonic) -> None:
        self.loop_stall_s, self.clock = loop_stall_s, clock
        self._lock = threading.Lock()
        self._tick: float | None = None  # None until the loop first ticks: starting is not hanging
        self._waits: dict[int, tuple[str, float]] = {}  # token -> (what, deadline)
        self._ids = itertools.count()
        self._failed: str | None = None

    def tick(self) -> None:
        self._tick = self.clock()

    async def beat(self, interval_s: float = TICK_S) -> None:
        """Tick from the event loop, forever."""
        while True:
            self.tick()
            await asyncio.sleep(interval_s)

    def begin(self, what: str, within_s: float) -> int:
        """A wait that must end within ``within_s``; returns the token for :meth:`end`."""
        with self._lock:
            token = next(self._ids)
            self._waits[token] = (what, self.clock() + within_s)
        return token

    def end(self, token: int) -> None:
        with self._lock:
            self._waits.pop(token, None)

    def fail(self, why: str) -> None:
        with self._lock:
            self._failed = self._failed or why

    def problem(self) -> str | None:
        """None while live, else what is wrong (the first failure, else the longest overdue wait,
        else a stalled loop)."""
        now = self.clock()
        with self._lock:
            if self._failed is not None:
                return self._failed
            overdue = [(now - deadline, what) for what, deadline in self._waits.values() if now > deadline]
        if overdue:
            late, what = max(overdue)
            return f"{what}: {late:.1f} s past its deadline"
        if self._tick is not None and now - self._tick > self.loop_stall_s:
            return f"event loop stalled: no tick for {now - self._tick:.1f} s (limit {self.loop_stall_s:g} s)"
        return None
