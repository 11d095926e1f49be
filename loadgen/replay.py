"""Open-loop trace replay into a pipeline's input topic, and collection of its results.

The sender follows the :class:`~slipstream.loadgen.schedule.Schedule` and never waits for results: every request
whose send time has come is produced at once (a burst stays a burst), delivery is confirmed in the
background, and the actual send time of each request is recorded next to its scheduled time so the
report can say how far behind the generator fell. ``created_ns`` is the actual send time (the clock the
pipeline's deadlines use), so generator lag is reported, not charged to the pipeline.

Alongside, three consumers read (no consumer group, nothing committed):
- the results topic from its end as of the start, feeding a :class:`~slipstream.loadgen.collect.Collector`;
- the control topic (compacted StageConfig) from the beginning, for the cost timeline;
- the scaling topic (tuner ScalingActions) from the beginning.

The run ends when every sent request has a result, or ``drain_s`` after the last send.

Through a gateway (``gateway_url``: the Open Inference Protocol over HTTP) each request is an HTTP
call on its own task, and its result is the answer (:func:`http_result`): the client's send and
answer times, the pipeline's status, reason and accuracy (the answer's hops are summed to ms, so a
gateway run reports no per-stage split); a 429 is ``dropped`` with reason ``shed``, a 504 with
no result ``dropped`` (``deadline``), any other refusal an ``error`` naming the code. No results
consumer runs then.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from aiokafka.errors import KafkaError

from ..schemas.records import InferenceRequest, InferenceResult
from ..streams import codec, control_io, kafka, topics
from ..streams.client import request_record
from ..streams.config import KafkaSettings
from ..streams.settle import settle_gc
from .collect import Collector
from .cost import events_from_records
from .report import summarize
from .schedule import DEFAULT_LAG_BUDGET_MS, Schedule, lag_stats

log = logging.getLogger(__name__)

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000
READ_CHUNK = 64  # results decoded between two chances for the sender to run
PayloadFactory = Callable[[int], bytes]
ProgressFn = Callable[[int, int, int], None]  # (sent, results, total)


@dataclass(frozen=True)
class ReplayTarget:
    """Where and what to send: built by the CLI from the pipeline spec."""

    pipeline: str
    source_stage: str
    slo_ms: float
    content_type: str
    accuracy_floor: float | None = None
    gateway_url: str | None = None  # send through this gateway (HTTP) instead of to the input topic

    @property
    def input_topic(self) -> str:
        return topics.stage_input(self.pipeline, self.source_stage)


@dataclass(frozen=True)
class ReplayOptions:
    run_id: str
    drain_s: float = 30.0  # how long to wait for results after the last send
    lead_s: float = 1.0  # start this long after the consumers are ready
    ready_timeout_s: float = 30.0


@dataclass
class ReplayOutcome:
    collector: Collector
    start_ns: int
    scheduled_ns: np.ndarray  # absolute scheduled send times
    actual_ns: np.ndarray  # absolute actual send times (0 where not sent)
    end_ns: int
    config_records: list[tuple[int, Mapping[str, Any]]] = field(default_factory=list)
    delivery_errors: int = 0

    @property
    def sent_mask(self) -> np.ndarray:
        return self.actual_ns > 0


def build_request(target: ReplayTarget, request_id: str, created_ns: int, payload: bytes) -> InferenceRequest:
    """An InferenceRequest as the first stage expects it (pure, for tests and the sender)."""
    return request_record(target.pipeline, request_id, created_ns, target.slo_ms, target.content_type,
                          payload, target.accuracy_floor)


def due_count(offsets_ns: np.ndarray, next_index: int, elapsed_ns: int) -> int:
    """How many requests from ``next_index`` on are due after ``elapsed_ns`` (the sender's burst size)."""
    return int(np.searchsorted(offsets_ns, elapsed_ns, side="right")) - next_index


async def replay(schedule: Schedule, target: ReplayTarget, settings: KafkaSettings,
                 payload_factory: PayloadFactory, options: ReplayOptions, *,
                 progress: ProgressFn | None = None) -> ReplayOutcome:
    import aiohttp

    collector = Collector(options.run_id)
    config_records: list[tuple[int, Mapping[str, Any]]] = []
    control_c = kafka.consumer(settings, topics.control(target.pipeline), topics.scaling(target.pipeline))
    via_kafka = target.gateway_url is None
    if via_kafka:
        results_c = kafka.consumer(settings, topics.results(target.pipeline), auto_offset_reset="latest",
                                   **kafka.REPORT_FETCH)
        producer = kafka.producer(settings)
        client = None
        await asyncio.gather(results_c.start(), control_c.start(), producer.start())
    else:
        results_c = producer = None
        client = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=target.slo_ms / 1000 + 30),
                                       connector=aiohttp.TCPConnector(limit=0))
        await control_c.start()
    stop = asyncio.Event()
    try:
        readers = [asyncio.create_task(_follow_control(control_c, config_records, stop,
                                                       topics.control(target.pipeline), target.pipeline))]
        if via_kafka:
            await _pin_to_end(results_c, options.ready_timeout_s)
            # fetch the input topic's metadata now: the first send would otherwise wait for it, late
            await asyncio.wait_for(producer.partitions_for(target.input_topic), options.ready_timeout_s)
            readers.append(asyncio.create_task(_read_results(results_c, collector, stop)))
            send = _kafka_sender(target, producer)
        else:
            send = _http_sender(target, client, collector)
        settle_gc(again=True)  # a full collection of the planner's heap stops the sender 100+ ms
        start_ns = time.time_ns() + int(options.lead_s * NS_PER_S)
        offsets = schedule.offsets_ns
        actual = np.zeros(len(offsets), dtype=np.int64)
        errors = await _send_all(schedule, send, payload_factory, collector, start_ns, actual, progress)
        collector.finish_sending()
        drain_until = time.monotonic() + options.drain_s
        while not collector.complete and time.monotonic() < drain_until:
            if any(t.done() for t in readers):
                break  # a reader failed: surface its exception below
            if progress:
                progress(len(collector.sent), len(collector.results), len(offsets))
            await asyncio.sleep(0.1)
        stop.set()
        for t in readers:
            if t.done() and t.exception():
                raise t.exception()
            t.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        if progress:
            progress(len(collector.sent), len(collector.results), len(offsets))
        return ReplayOutcome(collector, start_ns, start_ns + offsets, actual, time.time_ns(),
                             config_records, delivery_errors=errors[0])
    finally:
        stop.set()
        await asyncio.gather(*(c.stop() for c in (results_c, control_c, producer) if c is not None),
                             *([client.close()] if client is not None else []), return_exceptions=True)


Sender = Callable[[str, int, bytes], Any]  # (request id, created ns, payload) -> awaitable of a future


def _kafka_sender(target: ReplayTarget, producer) -> Sender:
    async def send(rid: str, created: int, payload: bytes):
        value = build_request(target, rid, created, payload)
        return await kafka.send(producer, target.input_topic, "InferenceRequest", value, key=rid,
                                timestamp_ns=created)
    return send


def _http_sender(target: ReplayTarget, http, collector: Collector) -> Sender:
    from ..gateway.client import infer_body

    url = f"{target.gateway_url.rstrip('/')}/v2/models/{target.pipeline}/infer"

    async def call(rid: str, created: int, body: bytes, headers: dict) -> None:
        try:
            async with http.post(url, data=body, headers=headers) as r:
                code, data, answer_headers = r.status, await r.read(), dict(r.headers)
        except Exception as exc:  # noqa: BLE001 - no answer at all: an error result, never a lost request
            code, data, answer_headers = 0, repr(exc).encode(), {}
        collector.offer(http_result(rid, created, target.slo_ms, time.time_ns(), code, data, answer_headers,
                                    pipeline=target.pipeline))

    async def send(rid: str, created: int, payload: bytes):
        body, headers = infer_body(payload, target.content_type, rid, target.slo_ms, target.accuracy_floor)
        return asyncio.ensure_future(call(rid, created, body, headers))
    return send


def http_result(request_id: str, created_ns: int, slo_ms: float, finished_ns: int, code: int, body: bytes,
                headers: Mapping[str, str], *, pipeline: str = "") -> InferenceResult:
    """A gateway's answer as the result of the request the client sent at ``created_ns`` (pure): times
    are the client's, the rest is the pipeline's result when the answer carries one (no hops)."""
    from ..gateway.client import GatewayError, Shed, answer_result

    accuracy = 1.0
    try:
        got = answer_result(code, body, headers) if code else None
        if got is None:
            status, reason = "error", f"no answer: {body[:200].decode(errors='replace')}"
        else:
            status, reason, accuracy = got.status, got.reason, got.accuracy
    except Shed as exc:
        status, reason = "dropped", f"shed: 429 {exc.message}"
    except TimeoutError as exc:
        status, reason = "dropped", f"deadline: 504 {exc}"
    except GatewayError as exc:
        status, reason = "error", f"gateway {exc.code}: {exc.message}"
    return InferenceResult(request_id=request_id, pipeline=pipeline, status=status, reason=reason,
                           created_ns=created_ns, deadline_ns=created_ns + int(slo_ms * NS_PER_MS),
                           finished_ns=finished_ns, accuracy=accuracy)


async def _send_all(schedule: Schedule, send: Sender, payload_factory: PayloadFactory,
                    collector: Collector, start_ns: int, actual: np.ndarray,
                    progress: ProgressFn | None) -> list[int]:
    offsets = schedule.offsets_ns
    total = len(offsets)
    errors = [0]
    pending: set[asyncio.Future] = set()

    def on_delivery(fut: asyncio.Future) -> None:
        pending.discard(fut)
        if fut.cancelled() or fut.exception() is not None:
            errors[0] += 1
            log.warning("request delivery failed: %s", "cancelled" if fut.cancelled() else fut.exception())

    i = 0
    last_progress = 0.0
    while i < total:
        now = time.time_ns()
        due = due_count(offsets, i, now - start_ns)
        if due <= 0:
            wait_s = (start_ns + int(offsets[i]) - now) / NS_PER_S
            await asyncio.sleep(min(wait_s, 0.05))
            continue
        for j in range(i, i + due):
            rid = schedule.request_id(collector.run_id, j)
            created = time.time_ns()
            try:
                fut = await send(rid, created, payload_factory(j))
            except KafkaError as exc:  # not produced (e.g. no broker within the send timeout): not expected
                errors[0] += 1
                log.warning("request %s not sent: %s", rid, type(exc).__name__)
                continue
            actual[j] = created
            collector.expect(rid)
            pending.add(fut)
            fut.add_done_callback(on_delivery)
        i += due
        if progress and time.monotonic() - last_progress > 0.2:
            last_progress = time.monotonic()
            progress(i, len(collector.results), total)
        await asyncio.sleep(0)  # let the readers run between bursts
    if pending:
        await asyncio.gather(*list(pending), return_exceptions=True)
    return errors


async def _pin_to_end(consumer, timeout_s: float) -> None:
    """Resolve the results consumer's position to the current end before anything is sent, so no
    result of this run can be skipped by a late 'latest' reset."""
    deadline = time.monotonic() + timeout_s
    while not consumer.assignment():
        if time.monotonic() > deadline:
            raise TimeoutError("the results topic has no partitions assigned: is the pipeline deployed?")
        await asyncio.sleep(0.1)
    await consumer.seek_to_end()
    for tp in consumer.assignment():
        await consumer.position(tp)


async def _read_results(consumer, collector: Collector, stop: asyncio.Event) -> None:
    while not stop.is_set():
        # small fetches, yielding between them: decoding a large batch in one go would hold the
        # event loop and delay the sender (it shows as send lag)
        batches = await consumer.getmany(timeout_ms=200, max_records=READ_CHUNK)
        await codec.prefetch(r.value for records in batches.values() for r in records)  # off the loop
        for records in batches.values():
            for rec in records:
                try:
                    collector.offer(codec.decode_typed("InferenceResult", rec.value))
                except codec.CodecError as exc:
                    log.warning("undecodable result at %s:%s: %s", rec.partition, rec.offset, exc)
            await asyncio.sleep(0)


async def _follow_control(consumer, out: list[tuple[int, Mapping[str, Any]]], stop: asyncio.Event,
                        control_topic: str, pipeline: str) -> None:
    """StageConfigs of the control topic (``slipstream.streams.control_io.read_record``: checked, epoch = offset;
    invalid ones logged and skipped) and ScalingActions of the scaling topic, with their timestamps."""
    while not stop.is_set():
        batches = await consumer.getmany(timeout_ms=200)
        await codec.prefetch(r.value for records in batches.values() for r in records)  # off the loop
        for records in batches.values():
            for rec in records:
                if rec.topic == control_topic:
                    try:
                        kind, value = control_io.read_record(rec, pipeline)
                    except control_io.InvalidControl as exc:
                        control_io.skipped(rec, exc)
                        continue
                    if kind == "StageConfig":  # not the planner's TunerHandoff
                        out.append((rec.timestamp * NS_PER_MS, value.to_dict()))  # for control.jsonl
                    continue
                try:
                    out.append((rec.timestamp * NS_PER_MS, codec.decode("ScalingAction", rec.value)))
                except codec.CodecError as exc:
                    log.warning("undecodable ScalingAction at %s:%s: %s", rec.topic, rec.offset, exc)


def summarize_outcome(outcome: ReplayOutcome, *, slo_ms: float, pipeline: str,
                      prices: Mapping[str, float], label: str = "", envelope=None,
                      lag_budget_ms: float = DEFAULT_LAG_BUDGET_MS,
                      default_configs: Sequence[Mapping[str, Any]] = ()):
    """The run's :class:`~slipstream.loadgen.report.Summary` (pure: everything comes from the outcome).

    ``default_configs`` (StageConfig-like dicts, e.g. the spec's stage defaults) stand for what runs
    before any record on the control topic: they get epoch -1, so any published config wins."""
    sent = outcome.sent_mask
    lag = lag_stats(outcome.scheduled_ns[sent], outcome.actual_ns[sent], budget_ms=lag_budget_ms)
    c = outcome.collector
    notes = []
    if outcome.delivery_errors:
        notes.append(f"{outcome.delivery_errors} requests failed to be delivered to Kafka")
    if c.conflicting_duplicates:
        notes.append(f"{c.conflicting_duplicates} requests got two results with different statuses")
    first_sent = int(outcome.actual_ns[sent].min()) if sent.any() else outcome.start_ns
    seen = {rec["stage"] for _, rec in outcome.config_records}
    assumed = [dict(d, epoch=-1) for d in default_configs if d["stage"] not in seen]
    if assumed:
        notes.append("no StageConfig on the control topic for " + ", ".join(d["stage"] for d in assumed)
                     + ": cost assumes the spec defaults ran all along")
    records = [(0, d) for d in assumed] + list(outcome.config_records)
    # the run lasts until the last send or the last result, whichever is later (results may be missing)
    last = max([int(outcome.actual_ns[sent].max())] if sent.any() else [first_sent])
    last = max([last] + [r.finished_ns for r in c.results.values()])
    return summarize(
        c.collected(), slo_ms=slo_ms, pipeline=pipeline, label=label, source="kafka",
        sent=len(c.sent), start_ns=first_sent, end_ns=last,
        configs=events_from_records(records, prices), envelope=envelope, lag=lag,
        duplicates=c.duplicates, notes=notes,
    )
