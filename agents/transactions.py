"""Exactly-once delivery: a partition's outputs and its input offset commit in one Kafka transaction.

**Fencing model.** aiokafka 0.14's ``send_offsets_to_transaction`` takes a group id only
(TxnOffsetCommit v0, no KIP-447 group metadata), so a zombie cannot be fenced by its group generation.
It is fenced by its transactional id instead, the model Kafka Streams used before KIP-447: one
transactional producer per *input partition*, with the id ``<group>.<topic>.<partition>``
(:func:`transactional_id`), the same on every worker and across restarts. Whoever is assigned a
partition starts its producer (:meth:`PartitionTransactions.open`, called by faust's
``on_rebalance_complete``, before faust seeks the partition to its committed offset): the broker bumps
the id's epoch, so the previous owner (a worker killed mid-window and restarted, or one frozen past its
session timeout that wakes up) can never commit again, and aborts the transaction it left open (one it
was already committing is completed first), so the committed offset read next is final.

**Order.** A committed offset covers exactly the inputs whose outputs are committed, so outputs wait
for the done prefix of their partition (``agents.acks.AckTracker.release``), and a partition's
transactions commit in offset order: one runner per partition takes everything released so far into
one transaction (begin, send, add offsets, commit); what is released meanwhile goes into the next.

**Failures.** A record refused before it is sent (too large, unencodable) is replaced at once, as in
at-least-once delivery (``agents.delivery.Delivery.replacement``: an error result, then a dead letter).
A failed send aborts the transaction; a permanent failure replaces that record and a transient one
(broker away, leader moving) backs off; then the whole transaction runs again. A fenced producer
means the partition has a new owner: its outputs are dropped, not acked, and the new owner makes them
again from the committed offset; the producer is closed and only a new assignment opens it again.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Hashable, Iterable

from agents.acks import Release
from agents.delivery import Delivery, Sent
from streams import kafka as kclient
from streams.config import KafkaSettings
from streams.spec import Pipeline

log = logging.getLogger(__name__)


def transactional_id(group_id: str, topic: str, partition: int) -> str:
    """The transactional id of the producer of one input partition's outputs: stable across restarts
    and owners, so the next owner fences the last."""
    return f"{group_id}.{topic}.{partition}"


class _Fenced(Exception):
    pass


class PartitionTransactions:
    def __init__(self, kafka: KafkaSettings, group_id: str, pipe: Pipeline, stage: str,
                 on_failure: Callable[[str], None] = lambda kind: None, max_backoff_s: float = 5.0,
                 **producer_overrides: Any) -> None:
        self.kafka, self.group_id, self.pipe, self.stage = kafka, group_id, pipe, stage
        self.on_failure, self.max_backoff_s = on_failure, max_backoff_s
        self.overrides = producer_overrides
        self.limits = None  # the topics' record limits (``streams.limits``), set by the worker at start
        self._producers: dict[Hashable, Any] = {}
        self._queue: dict[Hashable, list[tuple[Release, asyncio.Future]]] = {}
        self._runners: dict[Hashable, asyncio.Task] = {}

    # ------------------------------------------------------------------ ownership

    async def open(self, tps: Iterable[Hashable]) -> None:
        """Start the producers of newly assigned partitions (fencing their previous owners)."""
        new = [tp for tp in tps if tp not in self._producers]

        async def start(tp):
            prod = kclient.transactional_producer(self.kafka, transactional_id(self.group_id, tp[0], tp[1]),
                                                  **self.overrides)
            await prod.start()
            self._producers[tp] = prod

        await asyncio.gather(*(start(tp) for tp in new))
        if new:
            log.info("transactional producers started for %s", sorted(f"{t}[{p}]" for t, p in new))

    async def close(self, tps: Iterable[Hashable]) -> None:
        """After revocation: let queued transactions of ``tps`` finish, then stop their producers."""
        tps = list(tps)
        await self.flush(tps)
        await asyncio.gather(*(self._stop(tp) for tp in tps))

    async def close_all(self) -> None:
        await self.close(list(self._producers))

    async def flush(self, tps: Iterable[Hashable] | None = None) -> None:
        """Wait until every transaction queued for ``tps`` (default: all) has committed or failed."""
        want = set(self._runners) if tps is None else set(tps)
        while True:
            tasks = [t for tp, t in self._runners.items() if tp in want]
            if not tasks:
                return
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _stop(self, tp: Hashable) -> None:
        prod = self._producers.pop(tp, None)
        if prod is not None:
            try:
                await prod.stop()
            except Exception as exc:  # noqa: BLE001 - a fenced producer may refuse to stop cleanly
                log.warning("stopping the producer of %s[%d]: %r", tp[0], tp[1], exc)

    # ------------------------------------------------------------------ transactions

    def submit(self, releases: Iterable[Release]) -> list[asyncio.Future]:
        """Queue each release for its partition's next transaction; each future resolves True once
        committed, False if dropped (the partition's producer was fenced or is not open here)."""
        loop = asyncio.get_running_loop()
        futs = []
        for r in releases:
            fut = loop.create_future()
            futs.append(fut)
            if r.tp not in self._producers:
                log.warning("%s[%d] has no producer here (revoked or fenced): %d input(s) left to its owner",
                            r.tp[0], r.tp[1], len(r.events))
                fut.set_result(False)
                continue
            self._queue.setdefault(r.tp, []).append((r, fut))
            if r.tp not in self._runners:
                self._runners[r.tp] = asyncio.ensure_future(self._run(r.tp))
        return futs

    async def commit(self, releases: list[Release]) -> list[Release]:
        """Submit and wait; returns the releases that committed (their events may be acked)."""
        ok = await asyncio.gather(*self.submit(releases))
        return [r for r, good in zip(releases, ok) if good]

    async def _run(self, tp: Hashable) -> None:
        try:
            while self._queue.get(tp):
                batch, self._queue[tp] = self._queue[tp], []
                try:
                    await self._transaction(tp, [r for r, _ in batch])
                    good = True
                except _Fenced:
                    good = False
                    for more in self._queue.pop(tp, []):  # never commits again here
                        batch.append(more)
                    await self._stop(tp)
                except Exception:  # noqa: BLE001 - a bug: do not ack; the input is read again after a restart
                    log.exception("transaction of %s[%d] failed", tp[0], tp[1])
                    good = False
                for _, fut in batch:
                    if not fut.done():
                        fut.set_result(good)
        finally:
            self._runners.pop(tp, None)

    async def _transaction(self, tp: Hashable, batch: list[Release]) -> None:
        prod = self._producers.get(tp)
        if prod is None:
            raise _Fenced()
        delivery = Delivery(prod, self.pipe, self.stage, self.on_failure, limits=self.limits)
        records: list[tuple[Any, Any]] = [o for r in batch for o in r.outputs]
        offsets = {tp: batch[-1].next_offset}
        backoff = 0.1
        while True:
            try:
                await prod.begin_transaction()
                sent = await delivery.send_all(records)
                sent = [await self._replace_refused(delivery, s) for s in sent]
                results = await asyncio.gather(kclient.send_offsets(prod, offsets, self.group_id),
                                               *(s.fut for s in sent if s is not None), return_exceptions=True)
                failed = [(s, exc) for s, exc in zip([s for s in sent if s is not None], results[1:])
                          if isinstance(exc, BaseException)]
                if isinstance(results[0], BaseException):
                    raise results[0]
                if not failed:
                    await prod.commit_transaction()
                    return
                records = self._after_failures(delivery, sent, failed)
                raise RuntimeError(f"{len(failed)} record(s) of the transaction not delivered: {failed[0][1]!r}")
            except Exception as exc:  # noqa: BLE001 - every failure is handled below
                if kclient.is_fenced(prod, exc):
                    log.error("producer of %s[%d] fenced (%r): a newer owner has the partition; "
                              "%d output(s) dropped here", tp[0], tp[1], exc, len(records))
                    self.on_failure("fenced")
                    raise _Fenced() from exc
                log.warning("transaction of %s[%d] aborted (%r): running it again in %.1f s", tp[0], tp[1],
                            exc, backoff)
                self.on_failure("aborted")
                try:
                    await prod.abort_transaction()
                except Exception as abort_exc:  # noqa: BLE001
                    if kclient.is_fenced(prod, abort_exc):
                        raise _Fenced() from abort_exc
                    log.warning("abort of %s[%d] failed: %r", tp[0], tp[1], abort_exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff_s)

    async def _replace_refused(self, delivery: Delivery, s: Sent) -> Sent | None:
        """A record refused before it was sent goes in the same transaction as its replacement."""
        while s.error is not None:
            nxt = delivery.replacement(s, s.error)
            if nxt is None:
                log.error("cannot send %s to %s (%s), nor anything in its place: given up", s.out.record,
                          s.out.topic, s.error)
                self.on_failure("given-up")
                return None
            self.on_failure("replaced")
            s = await delivery._send_one(nxt, s.item)
        return s

    def _after_failures(self, delivery: Delivery, sent: list[Sent | None], failed: list) -> list:
        """The records of the next attempt: permanent failures replaced, everything else as it was."""
        bad = {id(s): exc for s, exc in failed}
        out = []
        for s in sent:
            if s is None:
                continue
            exc = bad.get(id(s))
            if exc is not None and not kclient.is_transient(exc):
                nxt = delivery.replacement(s, exc)
                self.on_failure("replaced" if nxt is not None else "given-up")
                if nxt is not None:
                    out.append((nxt, s.item))
                continue
            out.append((s.out, s.item))
        return out
