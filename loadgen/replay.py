"""Open-loop trace replay into a pipeline's input topic, and collection of its results.

The sender (:mod:`slipstream.loadgen.sender`, a process of its own) follows the
:class:`~slipstream.loadgen.schedule.Schedule` and never waits for results: every request whose send time
has come is produced at once (a burst stays a burst), delivery is confirmed in the background, and the
actual send time of each request is recorded next to its scheduled time so the report can say how far
behind the generator fell. ``created_ns`` is the actual send time (the clock the pipeline's deadlines
use), so generator lag is reported, not charged to the pipeline.

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
from typing import Any, Mapping, Sequence

import numpy as np

from ..schemas.records import InferenceResult
from ..streams import codec, control_io, kafka, topics
from ..streams.config import KafkaSettings
from .collect import Collector
from .cost import events_from_records
from .report import summarize
from .schedule import DEFAULT_LAG_BUDGET_MS, Schedule, lag_stats
from .sender import ProgressFn, ReplayTarget, SendJob, send_in_process

log = logging.getLogger(__name__)

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000
READ_CHUNK = 64  # results decoded between two chances for the control reader and progress to run


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
    sender_realtime: bool | None = None  # whether the sender ran at a real-time priority (None: not known)

    @property
    def sent_mask(self) -> np.ndarray:
        return self.actual_ns > 0


async def replay(schedule: Schedule, target: ReplayTarget, settings: KafkaSettings, payload: bytes,
                 options: ReplayOptions, *, progress: ProgressFn | None = None) -> ReplayOutcome:
    """Replay ``schedule`` (every request carrying ``payload``) and collect the results.

    A process of its own sends the requests (:mod:`slipstream.loadgen.sender`) while this one reads the
    results topic; through a gateway each call's answer, relayed by the sender, is its result."""
    collector = Collector(options.run_id)
    config_records: list[tuple[int, Mapping[str, Any]]] = []
    control_c = kafka.consumer(settings, topics.control(target.pipeline), topics.scaling(target.pipeline))
    via_kafka = target.gateway_url is None
    results_c = None
    if via_kafka:
        results_c = kafka.consumer(settings, topics.results(target.pipeline), auto_offset_reset="latest",
                                   **kafka.REPORT_FETCH)
        await asyncio.gather(results_c.start(), control_c.start())
    else:
        await control_c.start()
    stop = asyncio.Event()
    total = len(schedule)
    try:
        readers = [asyncio.create_task(_follow_control(control_c, config_records, stop,
                                                       topics.control(target.pipeline), target.pipeline))]
        if via_kafka:
            await _pin_to_end(results_c, options.ready_timeout_s)
            readers.append(asyncio.create_task(_read_results(results_c, collector, stop)))
        job = SendJob(target, settings, options.run_id, schedule.offsets_ns, payload, options.lead_s,
                      options.ready_timeout_s)
        shown = (lambda sent: progress(sent, len(collector.results), total)) if progress else None

        def answered(rid: str, created: int, finished: int, code: int, body: bytes, headers: dict) -> None:
            collector.offer(http_result(rid, created, target.slo_ms, finished, code, body, headers,
                                        pipeline=target.pipeline))
        sent = await send_in_process(job, shown, None if via_kafka else answered)
        start_ns, actual = sent.start_ns, sent.actual_ns
        for j in np.flatnonzero(actual):
            collector.expect(schedule.request_id(options.run_id, int(j)))
        collector.finish_sending()
        drain_until = time.monotonic() + options.drain_s
        while not collector.complete and time.monotonic() < drain_until:
            if any(t.done() for t in readers):
                break  # a reader failed: surface its exception below
            if progress:
                progress(len(collector.sent), len(collector.results), total)
            await asyncio.sleep(0.1)
        stop.set()
        for t in readers:
            if t.done() and t.exception():
                raise t.exception()
            t.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        if progress:
            progress(len(collector.sent), len(collector.results), total)
        return ReplayOutcome(collector, start_ns, start_ns + schedule.offsets_ns, actual, time.time_ns(),
                             config_records, delivery_errors=sent.errors, sender_realtime=sent.realtime)
    finally:
        stop.set()
        await asyncio.gather(*(c.stop() for c in (results_c, control_c) if c is not None), return_exceptions=True)


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
    if outcome.sender_realtime is False:
        notes.append("the sender ran at an ordinary priority (the host refused SCHED_RR): its send lag "
                     "includes the host's scheduling delays")
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
