"""The join worker of a fan-out pipeline: fragments from the join topic, whole results to the results
topic (``slipstream.agents.join`` does the joining). Run it as ``slipstream worker --pipeline F --stage join``.

Fragments are acked in offset order per partition (``slipstream.agents.acks``), each once its request is closed
(joined, in error, timed out, or already closed), so a committed offset never passes a fragment of an
open request and a restarted join rebuilds its state from Kafka. When partitions are revoked it
commits what it finished and forgets the open requests of those partitions (fragments are keyed by
request id, so a request lives on one partition), exactly as the stage worker does. A record that does
not decode, or a fragment whose share is not a fraction, goes to the dead-letter topic with its
request id logged; so does a fragment that breaks the data contract (``slipstream.streams.contract``), with the
fields it breaks; the join keeps running. Closed requests are remembered (``slipstream.agents.join``), and that
memory is refilled from the results topic on every assignment, so a fragment that comes late, or again
after a restart, never opens a second result (docs/guarantees.md, "The join"); a refill that fails
(past ``REFILL_S``, the broker away) leaves the worker not ready (``/readyz`` says why) until one
succeeds at a later assignment.

At least once, results and dead letters go through the stage workers' delivery path
(``slipstream.agents.delivery``: sent again, then replaced by an error result, then by a dead letter; the producer
replaced after the broker refused a batch). A result that not even that could write reopens its
request and leaves its fragments unacked; the worker reports itself not live, and its restart reads
them again, so the request is answered, never dropped.

With ``processing: exactly-once`` a result (or dead letter) is attached to the offset of the fragment
that closed its request, and it commits in one transaction with the offset that passes that fragment
(``slipstream.agents.transactions``, one transactional producer per join partition): results of a partition become
visible in offset order, so a request closed after an earlier one of its partition that is still open
waits for it (at most the join timeout), and a restarted join never emits a result twice.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Any, NamedTuple

import faust

from ..schemas.records import InferenceResult
from ..streams import codec, contract, kafka as kclient, procs, topics
from ..streams.app import AppSettings, join_group_after, make_app, rejoin_group
from ..streams.config import KafkaSettings
from ..streams.heartbeat import Heartbeat
from ..streams.limits import MAX_ERROR_CHARS, Limits, RecordTooLarge, read_limits
from ..streams.metrics_http import LOCAL, MetricsAddr
from ..streams.spec import Pipeline
from . import routing
from .acks import AckTracker, Release
from .delivery import Delivery
from .join import MAX_CLOSED, Joiner
from .metrics import StageMetrics
from .ready import serve_worker
from .transactions import PartitionTransactions

log = logging.getLogger(__name__)
JOIN = "join"
SWEEP_S = 0.2  # timeouts are points in time, not events: a periodic sweep closes them
REFILL_S = 60.0  # the bound on reading the memory of answered requests back from the results topic


class JoinWorker:
    def __init__(self, pipe: Pipeline, kafka: KafkaSettings, joiner: Joiner, metrics: StageMetrics) -> None:
        self.pipe, self.kafka, self.joiner, self.metrics = pipe, kafka, joiner, metrics
        self.acks = AckTracker()
        self.held: dict[str, list[tuple[Any, int]]] = {}  # open request id -> its fragments (tp, offset)
        self.lock = asyncio.Lock()  # one step at a time: a fragment, a sweep, a revocation
        self.delivery: Delivery | None = None  # at least once (:meth:`start`)
        self.heartbeat = Heartbeat()  # liveness (``/healthz``): the loop's ticks, writes given up
        self.not_ready: str | None = None  # why the join is not ready (``/readyz``): its memory not refilled
        self.refill_s = REFILL_S
        self.stream = None
        self.txns = PartitionTransactions(
            kafka, topics.consumer_group(pipe.name, JOIN), pipe, JOIN,
            self._delivery_failed) if kafka.exactly_once else None
        self._acking: set[asyncio.Future] = set()  # exactly-once: transactions whose events to ack after
        self._uncommitted: dict[str, Any] = {}  # exactly-once: request id -> tp, result not committed yet
        self.limits = Limits()  # the broker default until read from the cluster (:meth:`start`)
        self.bounds = contract.Bounds.of(pipe, JOIN, self.limits.of(topics.join(pipe.name)))  # slipstream.streams.contract

    async def start(self) -> None:
        self.limits = await read_limits(self.kafka, [topics.results(self.pipe.name), topics.join(self.pipe.name),
                                                     topics.dead_letters(self.pipe.name)])
        self.bounds = contract.Bounds.of(self.pipe, JOIN, self.limits.of(topics.join(self.pipe.name)))
        if self.txns is None:  # the Delivery owns the producer: it replaces one the broker refused a batch of
            self.delivery = await Delivery.started(self.kafka, self.pipe, JOIN, self._delivery_failed, self.limits,
                                                   max_request_size=self.limits.largest())
        else:
            self.txns.limits, self.txns.overrides["max_request_size"] = self.limits, self.limits.largest()

    def _delivery_failed(self, kind: str) -> None:
        self.metrics.lab(self.metrics.delivery_failures, outcome=kind).inc()

    async def stop(self) -> None:
        if self.delivery is not None:
            await self.delivery.close()
        if self.txns is not None:
            await self.txns.close_all()
            await asyncio.gather(*self._acking, return_exceptions=True)

    async def on_assigned(self, assigned: set) -> None:
        """Before faust seeks the partitions: start their transactional producers (fencing), then
        remember every request answered in the last ``remember_closed_ns`` (the results topic is the
        join's memory of closed requests: a restart, or a partition that moves, forgets none)."""
        if self.txns is not None:
            await self.txns.open(assigned)
        since_ms = (time.time_ns() - self.joiner.remember_closed_ns) // 1_000_000
        try:
            async with asyncio.timeout(self.refill_s):  # the consumer's start and metadata too
                answered = await kclient.keys_since(self.kafka, topics.results(self.pipe.name), since_ms,
                                                    self.refill_s)
        except LookupError:  # no results topic yet: nothing was ever answered
            answered = []
        except Exception as exc:  # noqa: BLE001 - past its deadline, the broker away: not ready, saying why
            self.not_ready = (f"join memory not refilled: the requests answered since {since_ms} ms were not "
                              f"read back from the results topic ({exc!r}); a fragment of one of them read "
                              f"again would open a second result")
            log.error("%s", self.not_ready)
            return
        async with self.lock:
            self.joiner.remember([(k.decode(errors="replace"), ts * 1_000_000) for k, ts in answered if k])
        self.not_ready = None
        log.info("remembered %d request(s) answered since %d ms", len(answered), since_ms)

    async def on_event(self, event: Any) -> None:
        m = event.message
        async with self.lock:
            self.acks.read(m.tp, m.offset, event)
            await codec.prefetch([event.value])  # off the event loop when a registry is set
            try:
                frag = codec.decode("InferenceResult", event.value)
            except codec.CodecError as exc:
                if await self._dead_letter(event, None, str(exc)):
                    await self._ack_done([(m.tp, m.offset)])
                return
            rid, now = frag["request_id"], time.time_ns()
            broken = contract.check("InferenceResult", frag, self.bounds, now)
            if broken:  # the rest of the request may still come, else the join times it out
                named = rid if len(rid) <= contract.MAX_ID_CHARS else contract.show(rid)
                if await self._dead_letter(event, rid, f"request {named}: {contract.describe(broken)}"[:2000]):
                    await self._ack_done([(m.tp, m.offset)])
                return
            self.held.setdefault(rid, []).append((m.tp, m.offset))
            self.metrics.lab(self.metrics.requests).inc()
            try:
                res = self.joiner.add(InferenceResult.from_dict(frag), now)
            except ValueError as exc:  # a share that is not a fraction (the contract says so first)
                if not await self._dead_letter(event, rid, str(exc)):
                    self.held[rid].remove((m.tp, m.offset))  # left unacked
                res = None
            if res is not None:
                await self._answer(res, (m.tp, m.offset), m.value)
            else:
                await self._release(rid)

    async def sweep(self) -> None:
        async with self.lock:
            for res in self.joiner.expire(time.time_ns()):
                await self._answer(res, self.held[res.request_id][-1], None)

    async def on_revoked(self, revoked: set, commit_offsets) -> None:
        """Before partitions move: forget their open requests (the new owner re-reads their
        uncommitted fragments) and commit the finished prefix of each revoked partition."""
        async with self.lock:
            moved = [rid for rid, locs in self.held.items() if any(tp in revoked for tp, _ in locs)]
            self.joiner.forget(moved)
            for rid in moved:
                del self.held[rid]
            offsets = self.acks.committable(revoked)
            if self.txns is not None:  # offsets were committed in the transactions
                await self.txns.close(revoked)
                await asyncio.gather(*self._acking, return_exceptions=True)
                # results not committed (a failed transaction): their fragments are read again
                lost = [rid for rid, tp in self._uncommitted.items() if tp in revoked]
                self.joiner.reopen(lost)
                for rid in lost:
                    del self._uncommitted[rid]
            elif offsets:
                await commit_offsets(offsets)
            self.acks.forget(revoked)
        log.info("revoked %d partition(s): committed %s; %d open request(s) left to their new owner",
                 len(revoked), {f"{tp.topic}[{tp.partition}]": o for tp, o in offsets.items()}, len(moved))

    async def _answer(self, res: InferenceResult, at: tuple[Any, int], original: bytes | None) -> None:
        """Write a closed request's result, then ack its fragments. A result neither written nor
        replaced (``slipstream.agents.delivery``: retried, then an error result, then a dead letter) reopens its
        request and leaves its fragments unacked: the worker reports itself not live, and its restart
        reads them again and joins them again."""
        rid = res.request_id
        if await self._emit(res, at, original):
            await self._release(rid)
            return
        self.joiner.reopen([rid])
        self.heartbeat.fail(f"request {rid}: joined result neither delivered nor replaced: fragments left unacked")

    async def _emit(self, res: InferenceResult, at: tuple[Any, int], original: bytes | None) -> bool:
        """Write a result (False: given up); exactly-once: attach it to ``at`` (tp, offset), the fragment
        it commits with. A joined result over the results topic's limit becomes an error result naming
        both sizes."""
        topic = topics.results(self.pipe.name)
        res = fit_result(self.limits, topic, res)
        out = routing.Out(topic, res.request_id, "InferenceResult", res)
        if not await self._write(out, at, _Answer(res, _Read(at[0].topic, at[0].partition, at[1], original))):
            return False
        self.metrics.lab(self.metrics.results, status=res.status).inc()
        self.metrics.observe_result(res)
        return True

    async def _release(self, rid: str) -> None:
        """Ack a request's fragments once it is no longer open (in offset order, via the tracker)."""
        if self.joiner.holds(rid):
            return
        await self._ack_done(self.held.pop(rid, []))

    async def _ack_done(self, offsets: list[tuple[Any, int]]) -> None:
        if self.txns is None:
            for event in self.acks.done_many(offsets):
                await self.stream.ack(event)
            return
        releases = self.acks.release(offsets)
        if releases:  # committed in the background, in offset order per partition; acked after
            task = asyncio.ensure_future(self._commit_and_ack(releases))
            self._acking.add(task)
            task.add_done_callback(self._acking.discard)

    async def _commit_and_ack(self, releases: list[Release]) -> None:
        for release in await self.txns.commit(releases):
            for out, _ in release.outputs:
                if out.record == "InferenceResult":
                    self._uncommitted.pop(out.value.request_id, None)
            for event in release.events:  # faust's bookkeeping only: the join topic has acks off
                await self.stream.ack(event)

    async def _write(self, out: routing.Out, at: tuple[Any, int], answers: "_Answer | None") -> bool:
        """At least once: through the stage workers' delivery path (``slipstream.agents.delivery``), False when
        given up. Exactly-once: attached to ``at``, to commit in its transaction (which decides)."""
        if self.txns is None:
            return not await self.delivery.settle(await self.delivery.send_all([(out, answers)]))
        self.acks.attach(at[0], at[1], [(out, None)])
        if out.record == "InferenceResult":
            self._uncommitted[out.value.request_id] = at[0]
        return True

    async def _dead_letter(self, event: Any, rid: str | None, error: str) -> bool:
        """Dead-letter a fragment; False when not even that could be written (the worker is then not
        live, and the caller leaves the fragment unacked)."""
        m = event.message
        log.error("dead letter %s[%d]@%d (request %s): %s", m.topic, m.partition, m.offset, rid, error)
        self.metrics.lab(self.metrics.dead_letters).inc()
        dl = routing.dead_letter(self.pipe, JOIN, event.value, m.topic, m.partition, m.offset, error, time.time_ns(),
                                 self.limits)
        if await self._write(dl, (m.tp, m.offset), None):
            return True
        self.heartbeat.fail(f"{m.topic}[{m.partition}]@{m.offset}: dead letter not delivered: left unacked")
        return False


class _Read(NamedTuple):  # the fragment a result answers, as ``slipstream.agents.routing.replacement`` dead-letters it
    topic: str
    partition: int
    offset: int
    value: bytes | None


class _Answer(NamedTuple):  # what a joined result answers (``slipstream.agents.delivery.Sent.item``)
    req: InferenceResult  # the fields ``slipstream.agents.routing.replacement`` builds an error result from
    record: _Read


def fit_result(limits: Limits, topic: str, res: InferenceResult) -> InferenceResult:
    """``res``, or, when it would not fit ``topic`` (``slipstream.streams.limits``), an error result for its
    request naming its size and the topic's limit."""
    try:
        # single-object framing: its header is the longer, so the size is an upper bound whatever the
        # registry setting, and no registry is asked here
        limits.check(topic, res.request_id.encode(), codec.encode("InferenceResult", res),
                     kclient.headers_for("InferenceResult"))
        return res
    except RecordTooLarge as exc:
        log.error("request %s: joined result not written: %s", res.request_id, exc)
        return replace(res, status="error", reason=f"join: cannot deliver the joined result: {exc}"[:MAX_ERROR_CHARS],
                       output=b"", content_type="")


def build_join_app(pipe: Pipeline, kafka: KafkaSettings, timeout_ms: float | None = None,
                   web_port: int | None = None, metrics_addr: MetricsAddr = LOCAL,
                   commit_interval_s: float = AppSettings.commit_interval_s,
                   max_closed: int = MAX_CLOSED) -> tuple[faust.App, JoinWorker]:
    """The join worker's faust app: fragments from the join topic, whole results to the results topic."""
    app = make_app(AppSettings(topics.consumer_group(pipe.name, JOIN), kafka, web_port=web_port,
                               commit_interval_s=commit_interval_s))
    metrics = StageMetrics.create(pipe.name, JOIN, pipe.slo_ms)
    joiner = Joiner(int((timeout_ms if timeout_ms is not None else pipe.slo_ms) * 1e6),
                    worker=procs.join_id(), max_closed=max_closed)
    worker = JoinWorker(pipe, kafka, joiner, metrics)
    if worker.txns is not None:  # a partition whose transaction failed is read again (slipstream.agents.transactions)
        worker.txns.on_reread = lambda tp: rejoin_group(app)
        worker.txns.on_stuck = worker.heartbeat.fail  # not live: restarted, the partition read again
    started = asyncio.Event()
    # exactly-once: faust commits nothing (acks off); the offsets go in the worker's transactions
    source = app.topic(topics.join(pipe.name), value_serializer="raw", key_serializer="raw",
                       acks=not kafka.exactly_once)

    @app.agent(source, concurrency=1, name="join-agent")
    async def join_agent(stream):
        worker.stream = s = stream.noack()
        await started.wait()
        async for event in s.events():
            await worker.on_event(event)

    async def start_worker() -> None:  # before the group join (its producer and limits first)
        await worker.start()
        started.set()

    join_group_after(app, start_worker)

    @app.timer(SWEEP_S)
    async def sweep() -> None:
        if started.is_set():
            await worker.sweep()

    async def on_revoked(sender, revoked, **kwargs) -> None:
        await worker.on_revoked(set(revoked), app.consumer._commit)  # faust's thread-safe commit

    async def on_rebalance_complete(sender, **kwargs) -> None:  # before faust seeks to committed offsets
        await worker.on_assigned(set(app.consumer.assignment()))

    app.on_partitions_revoked.connect(on_revoked)
    app.on_rebalance_complete.connect(on_rebalance_complete)

    @app.on_before_shutdown.connect
    async def _stop(sender, **kwargs) -> None:
        await worker.stop()

    serve_worker(JOIN, app, metrics, metrics_addr, started, worker.acks, worker.heartbeat,
                 lambda: worker.not_ready)
    return app, worker
