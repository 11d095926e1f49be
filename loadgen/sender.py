"""The load generator's sender, in a process of its own.

Past a pipeline's capacity the process that replays a trace also decodes every result, and in a live
run hosts the tuner and the planner; they share one interpreter lock with the sender, which then falls
behind its schedule (issue 40: p99 send lag 12-33 ms at three times the knee against a 5-ms budget).
So the sender runs here, alone: ``python -m slipstream.loadgen.sender`` reads one :class:`SendJob`
(JSON on stdin: where to send, the schedule's offsets, the payload), sends every request when it is
due (:func:`send_all`: to the input topic with a producer of its own, or as an HTTP call to a gateway)
and writes JSON lines to stdout:

- ``{"start_ns": N, "realtime": bool}`` once it is ready to send: the schedule's time zero,
  ``lead_s`` later, and whether it runs at a real-time priority (below);
- ``{"sent": n}`` as it goes;
- through a gateway, ``{"answer": [id, sent ns, answered ns, code, "<base64 body>", headers]}`` for
  each call, which the replay turns into the request's result;
- last, ``{"actual_ns": "<base64 int64>", "errors": n}``: each request's send time (0: not sent).

:func:`send_in_process` starts it and follows those lines. Its command line names it, so
:mod:`slipstream.loadgen.cpu` counts its CPU apart (kind ``load generator``).

A process of its own was not enough. On a host whose cores the pipeline saturates, the sender, asleep
until the next send is due, woke 5-11 ms late now and then: the kernel let the running workers finish
their slices first. So it asks for a real-time round-robin priority (:func:`realtime`, ``SCHED_RR`` 1,
where the host allows it: root or ``CAP_SYS_NICE``), which runs it as soon as it wakes. It uses about
a millisecond of CPU a request, and the kernel caps real-time tasks at 95 % of each second, so the
pipeline loses nothing it had. Where the host refuses, it runs as before and the report says so. Real
clients do not share the pipeline's cores; the load generator should come as close to that as a shared
host allows.
"""
from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import logging
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from aiokafka.errors import KafkaError

from ..schemas.records import InferenceRequest
from ..streams import kafka, topics
from ..streams.client import request_record
from ..streams.config import KafkaSettings
from ..streams.limits import read_limits
from .collect import Collector
from .schedule import Schedule

log = logging.getLogger(__name__)

MODULE = "slipstream.loadgen.sender"
NS_PER_S = 1_000_000_000
LINE_LIMIT = 1 << 26  # the last line carries every send time
REALTIME_PRIORITY = 1  # SCHED_RR's lowest: above every ordinary process, below the kernel's own threads
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


def build_request(target: ReplayTarget, request_id: str, created_ns: int, payload: bytes) -> InferenceRequest:
    """An InferenceRequest as the first stage expects it (pure, for tests and the sender)."""
    return request_record(target.pipeline, request_id, created_ns, target.slo_ms, target.content_type,
                          payload, target.accuracy_floor)


def due_count(offsets_ns: np.ndarray, next_index: int, elapsed_ns: int) -> int:
    """How many requests from ``next_index`` on are due after ``elapsed_ns`` (the sender's burst size)."""
    return int(np.searchsorted(offsets_ns, elapsed_ns, side="right")) - next_index


Sender = Callable[[str, int, bytes], Any]  # (request id, created ns, payload) -> awaitable of a future


def kafka_sender(target: ReplayTarget, producer) -> Sender:
    async def send(rid: str, created: int, payload: bytes):
        value = build_request(target, rid, created, payload)
        return await kafka.send(producer, target.input_topic, "InferenceRequest", value, key=rid,
                                timestamp_ns=created)
    return send


Answered = Callable[[str, int, int, int, bytes, dict], None]  # (id, sent ns, answered ns, code, body, headers)


def http_sender(target: ReplayTarget, http, answered: Answered) -> Sender:
    """Each request an Open Inference Protocol call to ``target.gateway_url`` on a task of its own; its
    answer, or code 0 and the exception when none came, goes to ``answered``."""
    from ..gateway.client import infer_body

    url = f"{target.gateway_url.rstrip('/')}/v2/models/{target.pipeline}/infer"

    async def call(rid: str, created: int, body: bytes, headers: dict) -> None:
        try:
            async with http.post(url, data=body, headers=headers) as r:
                code, data, answer_headers = r.status, await r.read(), dict(r.headers)
        except Exception as exc:  # noqa: BLE001 - no answer at all: an error result, never a lost request
            code, data, answer_headers = 0, repr(exc).encode(), {}
        answered(rid, created, time.time_ns(), code, data, answer_headers)

    async def send(rid: str, created: int, payload: bytes):
        body, headers = infer_body(payload, target.content_type, rid, target.slo_ms, target.accuracy_floor)
        return asyncio.ensure_future(call(rid, created, body, headers))
    return send


async def send_all(schedule: Schedule, send: Sender, payload: bytes, collector: Collector, start_ns: int,
                   actual: np.ndarray, progress: ProgressFn | None) -> list[int]:
    """Send every request of ``schedule`` when it is due (a burst at once), never waiting for delivery;
    ``actual[j]``: request j's send time (0: not sent). Returns [requests not delivered]."""
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
                fut = await send(rid, created, payload)
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


@dataclass(frozen=True)
class SendJob:
    target: ReplayTarget
    settings: KafkaSettings
    run_id: str
    offsets_ns: np.ndarray
    payload: bytes
    lead_s: float
    ready_timeout_s: float

    def to_json(self) -> bytes:
        return json.dumps({
            "target": dataclasses.asdict(self.target), "settings": dataclasses.asdict(self.settings),
            "run_id": self.run_id, "offsets_ns": _b64(self.offsets_ns), "payload": base64.b64encode(self.payload).decode(),
            "lead_s": self.lead_s, "ready_timeout_s": self.ready_timeout_s}).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> "SendJob":
        d = json.loads(raw)
        return cls(ReplayTarget(**d["target"]), KafkaSettings(**d["settings"]), d["run_id"],
                   _int64s(d["offsets_ns"]), base64.b64decode(d["payload"]), float(d["lead_s"]),
                   float(d["ready_timeout_s"]))


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a, dtype="<i8").tobytes()).decode()


def _int64s(s: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(s), dtype="<i8").astype(np.int64)


@dataclass(frozen=True)
class Sent:
    """What the sender process did: the schedule's time zero, each request's send time (0: not sent),
    the requests not delivered, and whether it ran at a real-time priority (:func:`realtime`)."""

    start_ns: int
    actual_ns: np.ndarray
    errors: int
    realtime: bool


async def send_in_process(job: SendJob, progress: Callable[[int], None] | None = None,
                          answered: Answered | None = None) -> Sent:
    """Run ``job`` in a sender process. ``progress(sent)`` as the sender reports it; through a gateway,
    ``answered`` each answer it relays. The process is killed if this is cancelled."""
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", MODULE, stdin=asyncio.subprocess.PIPE,
                                                stdout=asyncio.subprocess.PIPE, limit=LINE_LIMIT)
    try:
        proc.stdin.write(job.to_json())
        await proc.stdin.drain()
        proc.stdin.close()
        start = {}
        while line := await proc.stdout.readline():
            msg = json.loads(line)
            if "start_ns" in msg:
                start = msg
            elif "sent" in msg and progress is not None:
                progress(int(msg["sent"]))
            elif "answer" in msg and answered is not None:
                rid, created, finished, code, body, headers = msg["answer"]
                answered(rid, created, finished, code, base64.b64decode(body), headers)
            elif "actual_ns" in msg:
                await proc.wait()
                return Sent(int(start["start_ns"]), _int64s(msg["actual_ns"]), int(msg["errors"]),
                            bool(start["realtime"]))
        raise RuntimeError(f"the sender process ended with exit code {await proc.wait()} before its last report")
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def _say(**msg) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


async def _run(job: SendJob, is_realtime: bool) -> None:
    from ..streams.settle import settle_gc

    async with contextlib.AsyncExitStack() as stack:
        send = await _sender(job, stack)
        settle_gc()
        start_ns = time.time_ns() + int(job.lead_s * NS_PER_S)
        _say(start_ns=start_ns, realtime=is_realtime)
        actual = np.zeros(len(job.offsets_ns), dtype=np.int64)
        schedule = Schedule(job.offsets_ns, seed=0, rate_scale=1.0)
        errors = await send_all(schedule, send, job.payload, Collector(job.run_id), start_ns, actual,
                                lambda sent, _results, _total: _say(sent=sent))
        _say(actual_ns=_b64(actual), errors=errors[0])


async def _sender(job: SendJob, stack: contextlib.AsyncExitStack) -> Sender:
    """The job's sender, ready: a Kafka producer that knows the input topic, or an HTTP client."""
    if job.target.gateway_url is not None:
        import aiohttp

        http = await stack.enter_async_context(aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=job.target.slo_ms / 1000 + 30), connector=aiohttp.TCPConnector(limit=0)))
        return http_sender(job.target, http, lambda rid, created, finished, code, body, headers: _say(
            answer=[rid, created, finished, code, base64.b64encode(body).decode(), headers]))
    limits = await asyncio.wait_for(read_limits(job.settings, [job.target.input_topic]), job.ready_timeout_s)
    producer = kafka.producer(job.settings, max_batch_size=limits.batch_bytes())
    await asyncio.wait_for(producer.start(), job.ready_timeout_s)
    stack.push_async_callback(producer.stop)
    # the input topic's metadata now: the first send would otherwise wait for it, late
    await asyncio.wait_for(producer.partitions_for(job.target.input_topic), job.ready_timeout_s)
    return kafka_sender(job.target, producer)


def realtime() -> bool:
    """Ask for a real-time round-robin priority (``SCHED_RR`` 1, :data:`REALTIME_PRIORITY`) for this
    process; False when the host refuses it (no ``CAP_SYS_NICE``)."""
    try:
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(REALTIME_PRIORITY))
    except (AttributeError, OSError):
        return False
    return True


if __name__ == "__main__":
    asyncio.run(_run(SendJob.from_json(sys.stdin.buffer.read()), realtime()))
