"""Commits: a window's outputs produced together, their delivery awaited, then its inputs acked (faust
commits one past the done prefix) or, with exactly-once, outputs and offsets committed in one Kafka
transaction per input partition (``slipstream.agents.transactions``).

:class:`Commits` owns the producer settings of a window's burst, ``delivery`` (at least once; it owns
the producer) or ``txns`` (exactly-once), ``acks`` (what is read and what is done, in offset order per
partition) and ``backlog`` (windows awaiting delivery: while full, no new window and no fetch). It
tells its owner through two callbacks when the backlog changed (``room_changed``) and when a delivery
ended (``wake``).
"""
from __future__ import annotations

import time
from typing import Any, Awaitable, Callable

from ...streams import topics
from ...streams.config import KafkaSettings
from ...streams.heartbeat import Heartbeat
from ...streams.limits import Limits
from ...streams.spec import Pipeline
from ...streams.timeline import mark
from .. import routing
from ..acks import AckTracker
from ..backlog import Backlog, out_bytes
from ..delivery import Delivery
from ..metrics import StageMetrics
from ..transactions import PartitionTransactions
from ..window import Item
from . import log
from .serve import Answers

# A window's outputs are sent in one burst; the linger only has to cover the burst, and a producer
# batch (per partition) holds a whole window of records (``Limits.batch_bytes``), so a window is one
# produce request per partition instead of one per 16 KiB (aiokafka's default batch).
WINDOW_LINGER_MS = 1

Entry = tuple[Any, int, list]  # an input (partition, offset) and its outputs: (out, item) pairs


class Commits:
    def __init__(self, pipe: Pipeline, stage: str, kafka: KafkaSettings, metrics: StageMetrics,
                 heartbeat: Heartbeat, room_changed: Callable[[], None], wake: Callable[[], None]) -> None:
        self.pipe, self.stage, self.kafka, self.metrics, self.heartbeat = pipe, stage, kafka, metrics, heartbeat
        self.room_changed, self.wake = room_changed, wake
        self.acks = AckTracker()
        self.backlog = Backlog()
        self.limits = Limits()  # the broker default until read from the cluster (:meth:`start`)
        self.delivery: Delivery | None = None  # at least once (:meth:`start`)
        # exactly-once: one transactional producer per assigned input partition (opened on assignment)
        self.txns = PartitionTransactions(
            kafka, topics.consumer_group(pipe.name, stage), pipe, stage, self._delivery_failed,
            linger_ms=WINDOW_LINGER_MS, max_batch_size=self.limits.batch_bytes()) if kafka.exactly_once else None

    async def start(self, limits: Limits) -> None:
        """With the topics' record limits: the producer (at least once; the Delivery replaces one the
        broker refused a batch of), or the transactional producers' settings (exactly-once)."""
        self.limits = limits
        if self.txns is None:
            self.delivery = await Delivery.started(self.kafka, self.pipe, self.stage, self._delivery_failed,
                                                   limits, linger_ms=WINDOW_LINGER_MS,
                                                   max_batch_size=limits.batch_bytes(),
                                                   max_request_size=limits.largest())
        else:
            self.txns.limits = limits
            self.txns.overrides.update(max_request_size=limits.largest(), max_batch_size=limits.batch_bytes())

    async def close(self) -> None:
        if self.delivery is not None:
            await self.delivery.close()
        if self.txns is not None:
            await self.txns.close_all()

    def _delivery_failed(self, kind: str) -> None:
        self.metrics.lab(self.metrics.delivery_failures, outcome=kind).inc()

    def read(self, tp: Any, records: list) -> None:
        """Records of one partition read: each to be acked, in offset order, once answered."""
        self.acks.read_many(tp, records)

    def committable(self, tp: Any) -> int | None:
        """The offset faust commits for ``tp`` (``slipstream.agents.intake``): one past the done prefix; None
        with exactly-once, where each window's transaction commits its offsets."""
        return None if self.txns is not None else self.acks.committable({tp}).get(tp)

    def full(self) -> bool:
        """Too much awaits delivery: take no new window."""
        return self.backlog.full()

    async def finish(self, window: list[Item], answers: Answers) -> None:
        """Produce a window's outputs together, await their delivery, then ack its input offsets
        together (in offset order per partition): the one place a window's "produce + commit" happens,
        so it can become one Kafka transaction."""
        self.metrics.observe_outputs([o for outs, _ in answers for o in outs])  # results: latency, SLO
        per_input: dict[int, list] = {id(it): [] for it in window}
        for outs, it in answers:
            per_input[id(it)] += [(o, it) for o in outs]
        await self._deliver([(it.tp, it.offset, per_input[id(it)]) for it in window])

    async def dead_letters(self, bad: list[tuple[Any, Any, str]]) -> None:
        """Records that cannot be served ((partition, record, why)) to the dead-letter topic, then acked."""
        entries: list[Entry] = []
        for tp, m, error in bad:
            log.warning("dead letter %s[%d]@%d: %s", m.topic, m.partition, m.offset, error)
            out = routing.dead_letter(self.pipe, self.stage, m.value, m.topic, m.partition, m.offset, error,
                                      time.time_ns(), self.limits)
            entries.append((tp, m.offset, [(out, None)]))
        self.metrics.lab(self.metrics.dead_letters).inc(len(bad))
        await self._deliver(entries)

    async def _deliver(self, entries: list[Entry]) -> None:
        """Deliver each input's outputs and ack the inputs: at least once (every output in Kafka, then
        the acks), or exactly once (outputs and offsets in one transaction per partition, in offset
        order; ``slipstream.agents.transactions``), counted in the backlog meanwhile."""
        held = self.backlog.add(out_bytes(o for _, _, rs in entries for o, _ in rs))
        self.metrics.lab(self.metrics.backlog).set(self.backlog.windows)
        self.room_changed()
        try:
            await self._deliver_and_ack(entries)
        finally:
            self.backlog.done(held)
            self.metrics.lab(self.metrics.backlog).set(self.backlog.windows)
            self.room_changed()
            self.wake()

    async def _deliver_and_ack(self, entries: list[Entry]) -> None:
        if self.txns is None:  # faust commits the done prefix (``slipstream.agents.intake``, :meth:`committable`)
            owner = [k for k, (_, _, rs) in enumerate(entries) for _ in rs]
            lost = {owner[i] for i in await self.delivery.settle(
                await self.delivery.send_all([r for _, _, rs in entries for r in rs]))}
            if lost:  # not acked: read again after the restart that failing liveness brings
                self.heartbeat.fail(f"{len(lost)} input(s) neither delivered nor replaced: left unacked")
            self.acks.done_many([(tp, off) for k, (tp, off, _) in enumerate(entries) if k not in lost])
            return
        for tp, off, rs in entries:
            self.acks.attach(tp, off, rs)
        await self.txns.commit(self.acks.release([(tp, off) for tp, off, _ in entries]))

    async def revoke(self, revoked: set, commit_offsets: Callable[[dict], Awaitable[Any]]) -> tuple[dict, int]:
        """Partitions revoked (every window of theirs delivered): commit what they finished, close
        their transactional producers, forget them; (the offsets committed, unfinished items left)."""
        offsets = self.acks.committable(revoked)
        if self.txns is not None:  # the offsets are committed already, each in its window's transaction
            await self.txns.close(revoked)
        elif offsets:
            await commit_offsets(offsets)
        return offsets, self.acks.forget(revoked)

    async def assign(self, assigned: set) -> None:
        """Partitions assigned: start their transactional producers (exactly-once), fencing their
        previous owners."""
        if self.txns is not None:
            t0 = time.monotonic()
            await self.txns.open(assigned)
            mark("producers-started", partitions=len(assigned), ms=f"{(time.monotonic() - t0) * 1000:.0f}")
