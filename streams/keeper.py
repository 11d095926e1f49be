"""A producer kept usable, and whether Kafka answers: what a long-lived sender (the gateway, the client
API) needs to fail fast and heal without a restart.

- **Replaced after a refusal.** An idempotent producer whose batch the broker refused (or whose batch
  expired unsent) has a broken sequence: every later batch of that partition fails with
  ``OutOfOrderSequenceNumber`` until the producer is replaced. Every delivery future handed out is
  watched; the first failure marks the producer broken and a new one replaces it as soon as the cluster
  answers. Sends in the meantime wait for the new one (bounded by their own timeout).
- **Kafka's reachability.** A metadata round trip every ``probe_s`` (each bounded by ``probe_s``):
  ``unreachable`` names why after ``misses`` failures in a row (a paused broker holds a request without
  an answer; a stopped one refuses the connection), and clears on the next answer.

A record refused before it is sent (over its topic's limit, ``slipstream.streams.limits``) never reaches the
producer, so it breaks nothing.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from .limits import RecordTooLarge

log = logging.getLogger(__name__)


class ProducerKeeper:
    def __init__(self, make: Callable[[], Any], probe_s: float = 1.0, misses: int = 2) -> None:
        self.make, self.probe_s, self.misses = make, probe_s, misses
        self.producer: Any = None
        self.generation = 0  # producers started so far; a failure of an older one is not this one's
        self.replaced = 0
        self.unreachable: str | None = None
        self._usable = asyncio.Event()  # clear: the producer is broken, a new one is awaited
        self._wake = asyncio.Event()
        self._failed_probes = 0
        self._task: asyncio.Task | None = None
        self._stopping: set[asyncio.Task] = set()  # replaced producers being stopped

    async def start(self) -> None:
        self.producer = await self._started()
        self._usable.set()
        self._task = asyncio.create_task(self._keep())

    async def stop(self, timeout_s: float = 5.0) -> None:
        from .kafka import stop_producer

        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.producer is not None:
            await stop_producer(self.producer, timeout_s)

    async def usable(self) -> tuple[Any, int]:
        """(the producer to send with, its generation for :meth:`watch`), once it is not broken (the
        caller bounds the wait)."""
        await self._usable.wait()
        return self.producer, self.generation

    def watch(self, fut: asyncio.Future, generation: int) -> asyncio.Future:
        """Mark the producer of ``generation`` broken if ``fut`` (one of its deliveries) fails."""
        def done(f: asyncio.Future) -> None:
            if f.cancelled() or f.exception() is None or isinstance(f.exception(), RecordTooLarge):
                return
            if generation == self.generation and self._usable.is_set():
                self._usable.clear()
                self._wake.set()
                log.warning("a delivery failed (%r): the producer will be replaced", f.exception())
        fut.add_done_callback(done)
        return fut

    async def _started(self) -> Any:
        from .kafka import start_producer

        prod = await start_producer(self.make(), max(5.0, 5 * self.probe_s))
        self.generation += 1
        return prod

    async def _keep(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self.probe_s)
            except TimeoutError:
                pass
            self._wake.clear()
            if await self._probe() and not self._usable.is_set():
                await self._replace()

    async def _probe(self) -> bool:
        try:
            await asyncio.wait_for(self.producer.client.fetch_all_metadata(), self.probe_s)
        except Exception as exc:  # noqa: BLE001 - refused, timed out, no broker: Kafka is away
            self._failed_probes += 1
            if self._failed_probes >= self.misses:
                if self.unreachable is None:
                    log.warning("Kafka unreachable: %r", exc)
                self.unreachable = f"no metadata answer from Kafka in {self._failed_probes} tries ({exc!r})"
            return False
        if self.unreachable is not None:
            log.info("Kafka answers again")
        self._failed_probes, self.unreachable = 0, None
        return True

    async def _replace(self) -> None:
        from .kafka import retire_producer

        try:
            new = await self._started()
        except Exception as exc:  # noqa: BLE001 - tried again at the next probe
            log.warning("replacing the producer failed: %r", exc)
            return
        old, self.producer = self.producer, new
        self.replaced += 1
        self._usable.set()
        retire_producer(old, self._stopping, 5.0)
