"""Windows: the batch loop around :class:`slipstream.agents.window.WindowPlanner`, and the windows in flight.

Owns ``planner`` (the queue and the decision when to take a window), ``_wake`` (an arrival, a free
instance or a new config) and ``_inflight`` (windows and dead letters being delivered and acked). A
taken window is worked off by ``serve`` on a free instance, then handed to ``commit``.
"""
from __future__ import annotations

import asyncio
import time

from slipstream.agents import routing
from slipstream.agents.instances import Instance
from slipstream.agents.stage import log
from slipstream.agents.window import Item, Take, WindowPlanner, failed
from slipstream.streams import batching, codec


class Windows:
    planner: WindowPlanner
    _wake: asyncio.Event
    _inflight: set[asyncio.Future]

    async def run_batches(self) -> None:
        """The shell around :class:`slipstream.agents.window.WindowPlanner`: read what arrived, apply a pending
        config (a window boundary), take a window when the planner says so, else sleep until it is due
        or something changes (an arrival, a free instance, a config)."""
        while True:
            if self._intake:  # writer schemas the registry must give: looked up off the event loop
                await codec.prefetch(r.value for _, records, _ in self._intake for r in records)
            self._read_intake()
            self._apply_pending_config()  # window boundary
            s = batching.BatchSettings.from_ms(self.config.max_batch, self.config.batch_timeout_ms)
            inst = self.fleet.idle() if not self.backlog.full() else None  # back-pressure from delivery
            step = self.planner.poll(time.time_ns(), s, inst is not None)
            if isinstance(step, Take):
                self.metrics.lab(self.metrics.queue_depth).set(len(self.planner))
                self._update_room()
                inst.busy = True
                self._track(self._window(inst, step.items, s))
                continue
            self._wake.clear()
            if self._intake:
                continue
            if step.until_ns is None:
                await self._wake.wait()
                continue
            try:
                await asyncio.wait_for(self._wake.wait(), max(step.until_ns - time.time_ns(), 0) / 1e9)
            except TimeoutError:
                pass

    def _track(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._inflight.add(task)
        task.add_done_callback(self._window_done)

    def _window_done(self, task: asyncio.Future) -> None:
        self._inflight.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("window failed: %r", task.exception(), exc_info=task.exception())

    async def _window(self, inst: Instance, window: list[Item], s: batching.BatchSettings) -> None:
        """Work one window off on ``inst``, free the instance, then produce its outputs and ack it.
        Every item is answered whatever fails (:meth:`answer`), so the worker keeps acking and committing."""
        try:
            answers = await self.answer(inst, window, s)
        finally:
            inst.release()
            self._wake.set()
        await self._finish(window, answers)

    async def answer(self, inst: Instance, window: list[Item], s: batching.BatchSettings) -> list:
        """(records, item) for every item of ``window``. A window that fails (a bug: model errors
        and contract breaches are error results already) keeps what it answered; the rest are served
        again one by one, so only the item that fails alone ends as an error (``slipstream.agents.window.failed``)."""
        answers: list[tuple[list[routing.Out], Item]] = []
        try:
            await self.work_off(inst, self.fleet.variants, window, s, answers)
            return answers
        except Exception:
            log.exception("window of %d failed: serving its unanswered items one by one", len(window))
        answered = {id(it) for _, it in answers}
        for it in [it for it in window if id(it) not in answered]:
            one: list = []
            try:
                await self.work_off(inst, self.fleet.variants, [it], s, one)
            except Exception as exc:
                log.exception("request %s failed alone: error result", it.req.get("request_id"))
                one = one or [(failed(self.pipe, self.stage, it, f"{self.stage}: internal error: {exc!r}",
                                      time.time_ns()), it)]
            answers += one
        return answers

    async def drain(self) -> None:
        """Wait until every window taken so far has been delivered and acked."""
        while self._inflight:
            await asyncio.gather(*list(self._inflight), return_exceptions=True)
