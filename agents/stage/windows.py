"""Windows: the queue (:class:`slipstream.agents.window.WindowPlanner`), the batch loop around it, and the windows
in flight.

:class:`Windows` owns the queue, the wake-up (an arrival, a free replica, a delivery done or a new
config) and the windows (and dead letters) being worked off and delivered. Each turn of its loop asks
the intake for what arrived, the config switch for the config at this boundary, the pool for a free
replica (none while the delivery backlog is full), and the planner whether to take a window; a taken
window is served on its replica (``slipstream.agents.stage.serve``), the replica freed, then the window handed to
the commits (``slipstream.agents.stage.commit``).
"""
from __future__ import annotations

import asyncio
import time

from ...schemas.records import StageConfig
from ...streams import batching, codec
from ..metrics import StageMetrics
from ..replicas import Replica, VariantState
from ..window import Item, Take, WindowPlanner
from . import log
from .commit import Commits
from .config_switch import ConfigSwitch
from .intake import Intake
from .pool import ReplicaPool
from .serve import Server


class Windows:
    def __init__(self, intake: Intake, switch: ConfigSwitch, pool: ReplicaPool, server: Server, commits: Commits,
                 metrics: StageMetrics, wake: asyncio.Event) -> None:
        self.intake, self.switch, self.pool, self.server, self.commits = intake, switch, pool, server, commits
        self.metrics = metrics
        self.planner = WindowPlanner()
        self._wake = wake  # set by every part whose change may let a window be taken
        self._inflight: set[asyncio.Future] = set()

    def __len__(self) -> int:
        return len(self.planner)

    async def run(self) -> None:
        """The batch loop: admit what arrived, put a pending config in force (a window boundary), take
        a window when the planner says so, else sleep until it is due or something changes."""
        while True:
            if self.intake.arrived():  # writer schemas the registry must give: looked up off the event loop
                await codec.prefetch(self.intake.values())
            self._admit()
            cfg = self.switch.at_boundary()
            s = batching.BatchSettings.from_ms(cfg.max_batch, cfg.batch_timeout_ms)
            replica = self.pool.idle() if not self.commits.full() else None  # back-pressure from delivery
            step = self.planner.poll(time.time_ns(), s, replica is not None)
            if isinstance(step, Take):
                self.metrics.lab(self.metrics.queue_depth).set(len(self.planner))
                self.intake.update_room()
                replica.busy = True
                self.track(self._window(replica, cfg, self.pool.fleet.variants, step.items, s))
                continue
            self._wake.clear()
            if self.intake.arrived():
                continue
            if step.until_ns is None:
                await self._wake.wait()
                continue
            try:
                await asyncio.wait_for(self._wake.wait(), max(step.until_ns - time.time_ns(), 0) / 1e9)
            except TimeoutError:
                pass

    def _admit(self) -> None:
        if not self.intake.arrived():
            return
        got = self.intake.admit(self.pool.serve_ns(self.switch.config))
        if got.items:
            self.planner.add(got.items)
            self.metrics.lab(self.metrics.queue_depth).set(len(self.planner))
        for window, answers in got.answered:
            self.track(self.commits.finish(window, answers))
        if got.dead:
            self.track(self.commits.dead_letters(got.dead))

    def track(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._inflight.add(task)
        task.add_done_callback(self._window_done)

    def _window_done(self, task: asyncio.Future) -> None:
        self._inflight.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("window failed: %r", task.exception(), exc_info=task.exception())

    async def _window(self, replica: Replica, cfg: StageConfig, variants: dict[str, VariantState],
                      window: list[Item], s: batching.BatchSettings) -> None:
        """Work one window off on ``replica``, free the replica, then produce its outputs and ack it.
        Every item is answered whatever fails (``Server.serve_window``), so the worker keeps acking and committing."""
        try:
            answers = await self.server.serve_window(replica, cfg, variants, window, s)
        finally:
            replica.release()
            self._wake.set()
        await self.commits.finish(window, answers)

    def forget(self, revoked: set) -> None:
        """Partitions revoked: their queued items are dropped (Kafka redelivers them to their new owner)."""
        self.planner.forget(revoked)

    async def drain(self) -> None:
        """Wait until every window taken so far has been delivered and acked."""
        while self._inflight:
            await asyncio.gather(*list(self._inflight), return_exceptions=True)
