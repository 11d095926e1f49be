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
for the done prefix of their partition (``slipstream.agents.acks.AckTracker.release``), and a partition's
transactions commit in offset order: one runner per partition takes everything released so far into
one transaction (begin, send, add offsets, commit); what is released meanwhile goes into the next.

**Failures** (:func:`decide`, a pure function of what failed). A record refused before it is sent
(too large, unencodable) is replaced at once, as in at-least-once delivery
(``slipstream.agents.routing.replacement``: an error result, then a dead letter). Every other failure
ends the attempt, and what comes next depends on whether the commit was asked for:

- **fenced** (``ProducerFenced``/``InvalidProducerEpoch``: a newer producer holds the transactional id):
  stop. The producer is closed, its outputs dropped (not acked), and nothing more is written for the
  partition here until it is assigned here again. Usually the partition has a new owner, which makes
  them again from the committed offset. But the fencing producer may be a stale one: a start still
  retrying on a worker the partition was revoked from while the next owner's start finished first
  (faust calls ``on_rebalance_complete``, which opens the producers, from its own task, so a
  revocation does not wait for it), or the coordinator timing out a transaction. Then the partition
  is still assigned here and nobody would ever read it, so the consumer rejoins its group, as for a
  re-read: the partition is assigned again (here or elsewhere) and its new producer fences the stale
  one. (A start whose partition is revoked before it finishes is cancelled, or its producer stopped
  at once, which keeps that race rare.)
- **before the commit** (a send the broker refused, offsets not added, a step past its deadline, the
  producer's sender dead): the attempt's outcome is known, nothing of it can commit. Retry: a new
  producer with the same transactional id (its start makes the coordinator abort the open
  transaction, and gives fresh sequence numbers: aiokafka keeps the old ones after a refused batch,
  so the old producer would be refused again, ``OutOfOrderSequenceNumber``), then the same records
  again, permanent failures replaced. After ``MAX_ATTEMPTS`` failed attempts in a row: re-read.
- **the commit failed or timed out**: its outcome is unknown (the coordinator may still complete it),
  so the records in memory may not be sent again. Re-read: the producer is closed, the partition's
  outputs here are dropped (not acked), and the worker's consumer rejoins its group
  (:attr:`PartitionTransactions.on_reread`): the partition is revoked, assigned again and its new
  producer started (completing or aborting the old transaction) before it is read again from its
  committed offset, so nothing is discarded and nothing answered twice.

Every step is awaited with a deadline (``STEP_TIMEOUT_S``: start, send and offsets; commit), and
an attempt's sum stays inside the producer's ``transaction.timeout.ms`` (60 s). A producer's start is
tried ``START_TRIES`` times: then, on assignment, the partition is lost here (nothing of it commits)
and :attr:`PartitionTransactions.on_stuck` makes the worker not live, so its restart reads the
partition again; after an abort, the failure re-reads the partition.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable, Hashable, Iterable, NamedTuple

from ..streams import kafka as kclient
from ..streams.config import KafkaSettings
from ..streams.spec import Pipeline
from .acks import Release
from .delivery import Delivery

log = logging.getLogger(__name__)

RETRY, REREAD, STOP = "retry", "re-read", "stop"  # what follows a failed attempt
SEND, COMMIT, ABORT = "send", "commit", "abort"  # where it failed (SEND: begin, sends, offsets)
MAX_ATTEMPTS = 5  # failed attempts of one transaction in a row before its partition is re-read
STEP_TIMEOUT_S = 15.0  # a producer start; the sends and offsets of an attempt; a commit; an abort
START_TRIES = 5  # starts of a partition's producer before it counts as failed (about 80 s at most)


def decide(fenced: bool, phase: str, attempts: int) -> str:
    """What follows a failed transaction attempt (see the module docstring): STOP when the producer
    was fenced; REREAD when the commit or the abort failed (the outcome is unknown, or the producer
    unusable) or after ``MAX_ATTEMPTS`` failed attempts; else RETRY (abort, then the same records)."""
    if phase not in (SEND, COMMIT, ABORT):
        raise ValueError(f"unknown transaction phase {phase!r}")
    if fenced:
        return STOP
    if phase != SEND or attempts >= MAX_ATTEMPTS:
        return REREAD
    return RETRY


def transactional_id(group_id: str, topic: str, partition: int) -> str:
    """The transactional id of the producer of one input partition's outputs: stable across restarts
    and owners, so the next owner fences the last."""
    return f"{group_id}.{topic}.{partition}"


class _Lost(Exception):
    """The partition's outputs here are dropped: fenced (STOP) or to be read again (REREAD)."""


class _Revoked(Exception):
    """The partition whose producer was being started is no longer assigned here."""


class _Refused(Exception):
    """Records of the attempt the broker did not take (the first failure shown)."""

    def __init__(self, n: int, first: BaseException) -> None:
        super().__init__(f"{n} record(s) of the transaction not delivered: {first!r}")


class _Failed(NamedTuple):
    cause: BaseException
    phase: str  # SEND, COMMIT or ABORT


async def _no_reread(tp: Hashable) -> None:
    log.error("%s[%d] must be read again from its committed offset, but nothing here can make its "
              "consumer do that: its inputs are left to the next rebalance", tp[0], tp[1])


class PartitionTransactions:
    def __init__(self, kafka: KafkaSettings, group_id: str, pipe: Pipeline, stage: str,
                 on_failure: Callable[[str], None] = lambda kind: None, max_backoff_s: float = 5.0,
                 **producer_overrides: Any) -> None:
        self.kafka, self.group_id, self.pipe, self.stage = kafka, group_id, pipe, stage
        self.on_failure, self.max_backoff_s = on_failure, max_backoff_s
        # REREAD: make the worker's consumer read the partition again from its committed offset (the
        # app sets it: ``slipstream.streams.app.rejoin_group``)
        self.on_reread: Callable[[Hashable], Awaitable[None]] = _no_reread
        self.overrides = producer_overrides
        self.limits = None  # the topics' record limits (``slipstream.streams.limits``), set by the worker at start
        self._producers: dict[Hashable, Any] = {}
        self._queue: dict[Hashable, list[tuple[Release, asyncio.Future]]] = {}
        self._runners: dict[Hashable, asyncio.Task] = {}
        self._lost: set[Hashable] = set()  # dropped here until assigned again (logged once)
        self._owned: set[Hashable] = set()  # assigned here (opened and not closed since)
        self._starting: dict[Hashable, asyncio.Task] = {}  # producer starts in progress
        # a partition whose producer cannot start: only a restart helps (the worker sets its liveness)
        self.on_stuck: Callable[[str], None] = lambda why: log.error("%s", why)

    # ------------------------------------------------------------------ ownership

    async def open(self, tps: Iterable[Hashable]) -> None:
        """Start the producers of newly assigned partitions (fencing their previous owners). A start
        whose partition is revoked meanwhile (:meth:`close`) is cancelled, or its producer stopped;
        a partition's starts run one after the other."""
        tps = set(tps)
        self._owned |= tps
        new = [tp for tp in tps if tp not in self._producers]

        async def start(tp, before: asyncio.Task | None) -> None:
            try:
                if before is not None:  # a start from an earlier assignment, cancelled or about to finish
                    await asyncio.gather(before, return_exceptions=True)
                if tp in self._producers:
                    return
                prod = await self._new_producer(tp)
            except _Revoked:
                return
            except Exception as exc:  # noqa: BLE001 - nothing of tp commits here: read again after a restart
                self._lost.add(tp)
                self.on_stuck(f"producer of {tp[0]}[{tp[1]}] not started in {START_TRIES} tries ({exc!r}): "
                              f"its inputs are left uncommitted")
                return
            finally:
                if self._starting.get(tp) is asyncio.current_task():
                    del self._starting[tp]
            if tp not in self._owned:  # revoked while starting: the partition's next owner writes it
                log.warning("%s[%d] was revoked while its producer started: stopped unused", tp[0], tp[1])
                await kclient.stop_producer(prod, STEP_TIMEOUT_S)
                return
            self._producers[tp] = prod
            self._lost.discard(tp)

        tasks = {tp: asyncio.ensure_future(start(tp, self._starting.get(tp))) for tp in new}
        self._starting.update(tasks)
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        if new:
            log.info("transactional producers started for %s", sorted(f"{t}[{p}]" for t, p in new
                                                                      if (t, p) in self._producers))

    async def _new_producer(self, tp: Hashable):
        """A started producer of ``tp``'s transactional id (its start fences every older one); each
        start bounded by STEP_TIMEOUT_S, tried START_TRIES times (a broker away), then the last
        failure raised; cancelled as soon as ``tp`` is revoked (:meth:`close`)."""
        backoff = 0.1
        for tries in range(1, START_TRIES + 1):
            if tp not in self._owned:  # Python 3.11's wait_for may swallow the cancel of a start that just failed
                raise _Revoked()
            prod = kclient.transactional_producer(self.kafka, transactional_id(self.group_id, tp[0], tp[1]),
                                                  **self.overrides)
            try:
                await asyncio.wait_for(prod.start(), STEP_TIMEOUT_S)
                return prod
            except asyncio.CancelledError:  # revoked meanwhile (:meth:`close`)
                await kclient.stop_producer(prod, STEP_TIMEOUT_S)
                raise
            except Exception as exc:  # noqa: BLE001 - the coordinator away: again, backing off
                await kclient.stop_producer(prod, STEP_TIMEOUT_S)
                if tries == START_TRIES:
                    raise
                log.warning("starting the producer of %s[%d] failed (%r): again in %.1f s", tp[0], tp[1], exc,
                            backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff_s)

    async def close(self, tps: Iterable[Hashable]) -> None:
        """After revocation: cancel the producer starts of ``tps`` still in progress, let their queued
        transactions finish, then stop their producers."""
        tps = list(tps)
        self._owned -= set(tps)
        for tp in tps:  # not awaited: a start ends at its next step once its partition is not owned
            if tp in self._starting:
                self._starting[tp].cancel()
        await self.flush(tps)
        await asyncio.gather(*(self._stop(tp) for tp in tps))

    async def close_all(self) -> None:
        await self.close(set(self._producers) | self._owned | set(self._starting))

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
            await kclient.stop_producer(prod, STEP_TIMEOUT_S)

    # ------------------------------------------------------------------ transactions

    def submit(self, releases: Iterable[Release]) -> list[asyncio.Future]:
        """Queue each release for its partition's next transaction; each future resolves True once
        committed, False if dropped (the partition is fenced, to be re-read, or not open here)."""
        loop = asyncio.get_running_loop()
        futs = []
        for r in releases:
            fut = loop.create_future()
            futs.append(fut)
            if r.tp not in self._producers:
                if r.tp not in self._lost:
                    log.warning("%s[%d] has no producer here (revoked, fenced or being re-read): its inputs "
                                "from offset %d on are left to its next owner", r.tp[0], r.tp[1],
                                r.next_offset - len(r.events))
                    self._lost.add(r.tp)
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
                except _Lost:
                    good = False
                    batch += self._queue.pop(tp, [])  # never committed here: the next owner makes them
                except Exception:  # noqa: BLE001 - a bug: the state is unknown, so read it again
                    log.exception("transaction of %s[%d] failed: the partition is read again", tp[0], tp[1])
                    good = False
                    batch += self._queue.pop(tp, [])
                    self.on_failure("re-read")
                    self._lost.add(tp)
                    await self._stop(tp)
                    await self.on_reread(tp)
                for _, fut in batch:
                    if not fut.done():
                        fut.set_result(good)
        finally:
            self._runners.pop(tp, None)

    async def _transaction(self, tp: Hashable, batch: list[Release]) -> None:
        """Commit ``batch``'s outputs and offset in one transaction, attempt after attempt as
        :func:`decide` says; raises _Lost when the partition's outputs here are dropped."""
        records: list[tuple[Any, Any]] = [o for r in batch for o in r.outputs]
        offsets = {tp: batch[-1].next_offset}
        attempts, backoff = 0, 0.1
        while True:
            prod = self._producers.get(tp)
            if prod is None:
                raise _Lost()
            failed = await self._attempt(prod, Delivery(prod, self.pipe, self.stage, self.on_failure,
                                                         limits=self.limits), records, offsets)
            if failed is None:
                return
            attempts += 1
            action = decide(kclient.is_fenced(failed.cause), failed.phase, attempts)
            if action == RETRY:
                log.warning("transaction of %s[%d] failed (%r): aborted, running it again in %.1f s", tp[0],
                            tp[1], failed.cause, backoff)
                failed = await self._abort(tp, prod, failed)
                if failed is None:
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, self.max_backoff_s)
                    continue
                action = decide(kclient.is_fenced(failed.cause), failed.phase, attempts)
            self.on_failure("fenced" if action == STOP else "re-read")
            self._lost.add(tp)
            await self._stop(tp)
            if action == STOP and tp not in self._owned:
                log.error("producer of %s[%d] fenced (%r): a newer owner has the partition; %d output(s) "
                          "dropped here", tp[0], tp[1], failed.cause, len(records))
            elif action == STOP:  # still assigned here: a stale producer fenced this one (module docstring)
                log.error("producer of %s[%d] fenced (%r) while the partition is assigned here: %d output(s) "
                          "dropped, the group is rejoined so that its next owner reads it again", tp[0], tp[1],
                          failed.cause, len(records))
                await self.on_reread(tp)
            else:
                log.error("transaction of %s[%d] failed in its %s (%r): the partition is read again from its "
                          "committed offset", tp[0], tp[1], failed.phase, failed.cause)
                await self.on_reread(tp)
            raise _Lost()

    async def _attempt(self, prod, delivery: Delivery, records: list, offsets: dict) -> "_Failed | None":
        """One attempt: begin, send, add the offsets, commit, each bounded; None when committed, else
        what failed and where. A record refused before or at sending is replaced in ``records`` (in
        place) for the next attempt."""
        phase = SEND
        try:
            async with asyncio.timeout(STEP_TIMEOUT_S):
                await prod.begin_transaction()
                sent = [await delivery.replace_refused(s) for s in await delivery.send_all(records)]
                results = await asyncio.gather(kclient.send_offsets(prod, offsets, self.group_id),
                                               *(s.fut for s in sent if s is not None), return_exceptions=True)
            live = [s for s in sent if s is not None]
            failed = [(s, exc) for s, exc in zip(live, results[1:]) if isinstance(exc, BaseException)]
            if failed:
                records[:] = delivery.next_attempt(sent, failed)
                # fencing first: a fenced producer must stop, whatever else failed
                raise next((e for _, e in failed if kclient.is_fenced(e)), None) or _Refused(len(failed), failed[0][1])
            if isinstance(results[0], BaseException):
                raise results[0]
            phase = COMMIT
            await asyncio.wait_for(prod.commit_transaction(), STEP_TIMEOUT_S)
            return None
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure is decided on by the caller
            return _Failed(exc, phase)

    async def _abort(self, tp: Hashable, prod, failed: "_Failed") -> "_Failed | None":
        """Abort the failed attempt (bounded); None when aborted. A producer that had a record
        refused by the broker is replaced after the abort: aiokafka keeps the refused batch's sequence
        numbers, so the broker would refuse every later batch of that partition
        (``OutOfOrderSequenceNumber``). The abort answered by the coordinator shows the epoch was
        still this producer's; the new one is started only then."""
        try:
            await asyncio.wait_for(prod.abort_transaction(), STEP_TIMEOUT_S)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - decided on by the caller
            return _Failed(exc, ABORT)
        if isinstance(failed.cause, _Refused) and self._producers.get(tp) is prod:  # only ours replaced
            try:
                self._producers[tp] = await self._new_producer(tp)
            except Exception as exc:  # noqa: BLE001 - no new producer: re-read (decided on by the caller)
                return _Failed(exc, ABORT)
            await kclient.stop_producer(prod, STEP_TIMEOUT_S)
        return None

