"""The client API: submit requests to a pipeline and await their results by request id.

    async with PipelineClient(pipe, KafkaSettings.from_env()) as c:
        rid = await c.submit(payload, content_type="image/png")
        result = await c.result(rid, timeout_s=5)   # an InferenceResult: result.status, result.output

    with SyncClient(pipe, settings) as c:           # the same from blocking code
        result = c.call(payload, timeout_s=5)

Requests and results are the typed records of ``slipstream.schemas.records`` (frozen dataclasses built
from the ``.avsc``): :func:`make_request` returns an ``InferenceRequest`` (change a copy with
``dataclasses.replace``), and results come back as ``InferenceResult``, decoded at the codec's edge.

The client reads the results topic from its end at start-up, so it sees only results of requests
sent after it started. It keeps only its own requests' results (those it sent, awaits or
``expect``s);
other clients' results on the shared topic are skipped, and so are duplicates (at-least-once
redelivery), counted in ``duplicates``. A record that does not decode is logged with its
topic/partition/offset, counted in ``undecodable`` and skipped. If the reader stops for any other
reason, every waiting ``result()`` raises at once instead of timing out.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from typing import Any, Mapping

from ..schemas.records import InferenceRequest, InferenceResult
from . import codec, kafka as kclient, topics
from .config import KafkaSettings
from .contract import deadline_ns
from .keeper import ProducerKeeper
from .limits import Limits, read_limits
from .spec import Pipeline

log = logging.getLogger(__name__)


def request_record(pipeline: str, request_id: str, created_ns: int, slo_ms: float, content_type: str,
                   payload: bytes, accuracy_floor: float | None = None) -> InferenceRequest:
    """An InferenceRequest as a client sends it: deadline = created + SLO, the stage fields (hops,
    fragment, path, accuracy) at their schema defaults."""
    return InferenceRequest(request_id=request_id, pipeline=pipeline, created_ns=created_ns,
                            deadline_ns=deadline_ns(created_ns, slo_ms), accuracy_floor=accuracy_floor,
                            content_type=content_type, payload=payload)


def make_request(pipe: Pipeline, payload: bytes, content_type: str | None = None,
                 request_id: str | None = None, slo_ms: float | None = None,
                 accuracy_floor: float | None = None, created_ns: int | None = None) -> InferenceRequest:
    return request_record(pipe.name, request_id or uuid.uuid4().hex,
                          time.time_ns() if created_ns is None else created_ns, slo_ms or pipe.slo_ms,
                          content_type or pipe.input_content_type, payload, accuracy_floor)


class PipelineClient:
    """``linger_ms``: the producer's wait for more records to batch (default: ``slipstream.streams.kafka.producer``'s,
    1 ms); 0 sends each request as it comes, what accumulates while a produce is in flight still going
    in one batch (the gateway, which produces one request per HTTP call, uses 0)."""

    def __init__(self, pipe: Pipeline, kafka: KafkaSettings, linger_ms: int | None = None) -> None:
        self.pipe, self.kafka = pipe, kafka
        self._producer_kw = {} if linger_ms is None else {"linger_ms": linger_ms}
        self.input_topic = topics.stage_input(pipe.name, pipe.source)
        self.limits = Limits()  # the input topic's, read at start (before the producer is made)
        self._keeper = ProducerKeeper(lambda: kclient.producer(kafka, max_batch_size=self.limits.batch_bytes(),
                                                               **self._producer_kw))
        self._consumer = None
        self._reader: asyncio.Task | None = None
        self._waiters: dict[str, asyncio.Future] = {}  # own requests without a result yet
        self.results: dict[str, InferenceResult] = {}  # own requests' first results
        self.duplicates = 0
        self.undecodable = 0

    async def __aenter__(self) -> "PipelineClient":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    async def start(self) -> None:
        self.limits = await read_limits(self.kafka, [self.input_topic])
        await self._keeper.start()
        self._consumer = kclient.consumer(self.kafka, group_id=None, auto_offset_reset="latest")
        await self._consumer.start()
        tps = await kclient.topic_partitions(self._consumer, topics.results(self.pipe.name))
        self._consumer.assign(tps)
        await self._consumer.seek_to_end(*tps)
        for tp in tps:  # resolve the end offsets now, before any request is sent
            await self._consumer.position(tp)
        self._reader = asyncio.create_task(self._read())
        self._reader.add_done_callback(self._reader_stopped)

    async def stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            try:
                await self._reader
            except asyncio.CancelledError:
                pass
        if self._consumer is not None:
            await self._consumer.stop()
        await self._keeper.stop()

    async def send(self, request: InferenceRequest | Mapping[str, Any], wait: bool = True,
                   timeout_s: float | None = None):
        """Produce a prepared request (see :func:`make_request`); returns the delivery future when
        ``wait`` is False, so open-loop senders can keep going. ``request`` may also be a mapping of
        ``InferenceRequest`` fields, for callers that build their own (turned into the record first:
        a field the schema lacks raises ``ValueError``, a missing required one ``TypeError``, nothing
        sent). Raises ``slipstream.streams.limits.RecordTooLarge`` for a request over the input topic's
        limit (nothing sent), and ``TimeoutError`` when Kafka has not confirmed it within ``timeout_s``
        (it may still be written later)."""
        req = request if isinstance(request, InferenceRequest) else InferenceRequest.from_dict(request)
        async with asyncio.timeout(timeout_s):
            prod, generation = await self._keeper.usable()
            fut = await kclient.send(prod, self.input_topic, "InferenceRequest", req, key=req.request_id,
                                     timestamp_ns=req.created_ns, limits=self.limits)
            self.expect(req.request_id)
            self._keeper.watch(fut, generation)
            if wait:
                await asyncio.shield(fut)
        return fut

    @property
    def unreachable(self) -> str | None:
        """Why Kafka is taken to be away (no metadata answer in a row of probes), else None."""
        return self._keeper.unreachable

    async def submit(self, payload: bytes, **kw: Any) -> str:
        req = make_request(self.pipe, payload, **kw)
        await self.send(req)
        return req.request_id

    async def result(self, request_id: str, timeout_s: float = 30.0) -> InferenceResult:
        if request_id in self.results:
            return self.results[request_id]
        fut = self.expect(request_id)
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except TimeoutError:
            raise TimeoutError(f"no result for request {request_id} within {timeout_s} s "
                               f"(it may still be in Kafka)") from None

    def forget(self, request_id: str) -> None:
        """Stop keeping ``request_id``'s result (a long-lived caller, such as the gateway, calls this
        once it has answered or given up, so the client holds only requests still awaited)."""
        self._waiters.pop(request_id, None)
        self.results.pop(request_id, None)

    @property
    def running(self) -> bool:
        """Started, with the results reader assigned every partition and still reading."""
        return self._reader is not None and not self._reader.done()

    def expect(self, request_id: str) -> asyncio.Future:
        """Keep the result of ``request_id`` when it comes (``send`` and ``result`` call this; call it
        yourself for a request someone else sends before its result can arrive)."""
        if self._reader is not None and self._reader.done():
            raise RuntimeError("the results reader has stopped") from _reader_error(self._reader)
        return self._waiters.setdefault(request_id, asyncio.get_running_loop().create_future())

    async def _read(self) -> None:
        async for msg in self._consumer:
            await codec.prefetch([msg.value])  # off the event loop when a registry is set
            try:
                res = codec.decode_typed("InferenceResult", msg.value)
            except codec.CodecError as exc:
                self.undecodable += 1
                log.warning("undecodable record on %s[%d]@%d skipped: %s", msg.topic, msg.partition,
                            msg.offset, exc)
                continue
            self.offer(res)

    def offer(self, res: InferenceResult) -> None:
        """Take one decoded result: keep it if it answers one of this client's requests."""
        rid = res.request_id
        if rid in self.results:
            self.duplicates += 1
            return
        fut = self._waiters.pop(rid, None)
        if fut is None:
            return  # another client's request
        self.results[rid] = res
        if not fut.done():
            fut.set_result(res)

    def _reader_stopped(self, task: asyncio.Task) -> None:
        if task.cancelled():
            return
        exc = RuntimeError(f"the results reader stopped: {_reader_error(task)!r}")
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_exception(exc)


def _reader_error(task: asyncio.Task) -> BaseException | None:
    return None if task.cancelled() else task.exception()


class SyncClient:
    """The same client for blocking code: an event loop on a background thread. ``client``: another
    client with the same calls (``slipstream.gateway.client.GatewayClient``) instead of a PipelineClient;
    results are what it returns (``InferenceResult`` records from either)."""

    def __init__(self, pipe: Pipeline, kafka: KafkaSettings, client: Any = None) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._client = client if client is not None else PipelineClient(pipe, kafka)

    def _run(self, coro, timeout: float | None = None):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def __enter__(self) -> "SyncClient":
        self._thread.start()
        self._run(self._client.start())
        return self

    def __exit__(self, *exc: Any) -> None:
        self._run(self._client.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()

    def submit(self, payload: bytes, **kw: Any) -> str:
        return self._run(self._client.submit(payload, **kw))

    def result(self, request_id: str, timeout_s: float = 30.0) -> InferenceResult:
        return self._run(self._client.result(request_id, timeout_s))

    def call(self, payload: bytes, timeout_s: float = 30.0, **kw: Any) -> InferenceResult:
        return self.result(self.submit(payload, **kw), timeout_s)
