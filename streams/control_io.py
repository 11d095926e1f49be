"""Control-plane Kafka bindings shared by the planner and the tuner: arrival timestamps in,
StageConfig/ScalingAction out, partitions grown.

Arrivals are the *record timestamps* (ms, set by the producer from ``created_ns``) of the pipeline's
input topic, i.e. of the source stage's input; payloads are never decoded. The consumer has no group
(it must not steal partitions from the source stage's workers): it assigns every partition itself,
starts ``lookback_s`` back (``offsets_for_times``) so the envelope has history at once, and follows the
control topic from the beginning (compacted: the latest StageConfig per stage) so a scaling action
republishes the stage's current variant/batch with only the replicas changed.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import AsyncIterator, Callable, Mapping

import numpy as np
from streams import admin, codec, kafka as kclient, topics
from streams.config import KafkaSettings

log = logging.getLogger(__name__)
NS_PER_MS = 1_000_000


class KafkaArrivals:
    """Async iterator of timestamp chunks (epoch ns) from the input topic; control records go to
    ``on_stage_config``. Without a group, aiokafka assigns every partition of both topics and picks up
    partitions added later (from their beginning) on its next metadata refresh."""

    def __init__(self, settings: KafkaSettings, pipeline: str, source_stage: str, *,
                 on_stage_config: Callable[[Mapping], None], lookback_s: float = 60.0,
                 poll_ms: int = 100, on_handoff: Callable[[Mapping], None] | None = None) -> None:
        self.settings = settings
        self.input_topic = topics.stage_input(pipeline, source_stage)
        self.control_topic = topics.control(pipeline)
        self._on_config = on_stage_config
        self._on_handoff = on_handoff
        self._lookback_ms = int(lookback_s * 1000)
        self._poll_ms = poll_ms
        self._consumer = None

    async def start(self) -> None:
        self._consumer = kclient.consumer(self.settings, self.input_topic, self.control_topic, group_id=None,
                                          enable_auto_commit=False, auto_offset_reset="earliest")
        await self._consumer.start()
        for _ in range(100):  # the assignment needs one metadata round trip
            if any(tp.topic == self.input_topic for tp in self._consumer.assignment()):
                break
            await asyncio.sleep(0.05)
        inputs = [tp for tp in self._consumer.assignment() if tp.topic == self.input_topic]
        if not inputs:
            raise LookupError(f"topic {self.input_topic!r} has no partitions (run the pipeline's topic setup)")
        since = time.time_ns() // NS_PER_MS - self._lookback_ms
        offsets = await self._consumer.offsets_for_times({tp: since for tp in inputs})
        for tp in inputs:
            if offsets.get(tp) is None:
                await self._consumer.seek_to_end(tp)
            else:
                self._consumer.seek(tp, offsets[tp].offset)

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    def __aiter__(self) -> AsyncIterator[np.ndarray]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[np.ndarray]:
        if self._consumer is None:
            await self.start()
        while True:
            batch = await self._consumer.getmany(timeout_ms=self._poll_ms, max_records=20_000)
            stamps: list[int] = []
            for tp, records in batch.items():
                if tp.topic == self.control_topic:
                    for r in records:
                        self._control(r)
                else:
                    stamps.extend(r.timestamp for r in records)
            if stamps:
                yield np.asarray(stamps, dtype=np.int64) * NS_PER_MS


    def _control(self, r) -> None:
        """A control record to its callback, by its schema header (StageConfig, TunerHandoff)."""
        try:
            if record_type(r) == "TunerHandoff":
                if self._on_handoff is not None:
                    self._on_handoff(codec.decode("TunerHandoff", r.value))
            else:
                self._on_config(codec.decode("StageConfig", r.value))
        except codec.CodecError as exc:
            log.warning("control topic offset %d: %s", r.offset, exc)


class KafkaPublisher:
    """Publishes tuner records, awaiting delivery of each (a scaling action is never fire-and-forget)."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self._producer = None

    async def start(self) -> None:
        self._producer = kclient.producer(self.settings)
        await self._producer.start()

    async def stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    async def publish(self, topic: str, record: str, value: Mapping, key: str) -> None:
        fut = await kclient.send(self._producer, topic, record, value, key=key)
        await fut


def record_type(r) -> str:
    """The record type a control-topic record's schema header names (StageConfig if it has none)."""
    return dict(r.headers or ()).get(kclient.SCHEMA_HEADER, b"StageConfig").decode(errors="replace")


def grower(settings: KafkaSettings):
    """``grow(topic, n)`` for the service, through ``streams.admin.grow_partitions``."""

    async def grow(topic: str, count: int) -> int:
        return await admin.grow_partitions(settings, topic, count)

    return grow


async def stage_partitions(settings: KafkaSettings, pipeline: str, stages: list[str]) -> dict[str, int]:
    """Current partition count of each stage's input topic."""
    names = {topics.stage_input(pipeline, s): s for s in stages}
    counts = await admin.partition_counts(settings, list(names))
    return {names[t]: n for t, n in counts.items()}


def control_records(records, kind: str) -> list[dict]:
    """The ``kind`` records (StageConfig, TunerHandoff) among control-topic records, by their schema
    header, decoded; undecodable ones are logged and skipped."""
    out = []
    for r in records:
        if record_type(r) != kind:
            continue
        try:
            out.append(codec.decode(kind, r.value))
        except codec.CodecError as exc:
            log.warning("control topic offset %d: %s", r.offset, exc)
    return out


async def read_control(settings: KafkaSettings, pipeline: str, kind: str, *, timeout_s: float = 10.0,
                       wait_s: float = 0.0, on_wait: Callable[[str, float], None] | None = None) -> list[dict]:
    """Every ``kind`` record on the pipeline's control topic, read to its end (within ``timeout_s``).
    When there is none and ``wait_s`` > 0: ``on_wait(topic, wait_s)``, then follow the topic until one
    arrives or ``wait_s`` has passed (an empty list)."""
    topic = topics.control(pipeline)
    cons = kclient.consumer(settings, group_id=None, enable_auto_commit=False)
    await cons.start()
    found: list[dict] = []

    def take(batch) -> None:
        found.extend(control_records([r for records in batch.values() for r in records], kind))

    try:
        tps = await kclient.topic_partitions(cons, topic)
        cons.assign(tps)
        ends = await cons.end_offsets(tps)
        await cons.seek_to_beginning(*tps)
        async with asyncio.timeout(timeout_s):
            while behind := [tp for tp in tps if await cons.position(tp) < ends[tp]]:
                take(await cons.getmany(*behind, timeout_ms=200))
        if found or wait_s <= 0:
            return found
        (on_wait or (lambda t, w: log.info("no %s on %s yet: waiting up to %.0f s", kind, t, w)))(topic, wait_s)
        try:
            async with asyncio.timeout(wait_s):
                while not found:
                    take(await cons.getmany(*tps, timeout_ms=1000))
        except TimeoutError:
            pass
        return found
    finally:
        await cons.stop()


async def latest_epoch(settings: KafkaSettings, pipeline: str, timeout_s: float = 10.0) -> int:
    """The highest StageConfig epoch on the pipeline's control topic (0 when it is empty)."""
    records = await read_control(settings, pipeline, "StageConfig", timeout_s=timeout_s)
    return max((int(r["epoch"]) for r in records), default=0)


def newest_handoff(records: list[dict], pipeline: str) -> dict | None:
    """The pipeline's TunerHandoff of the highest epoch (None when there is none)."""
    mine = [r for r in records if r.get("pipeline") == pipeline]
    return max(mine, key=lambda r: int(r["epoch"]), default=None)


async def latest_handoff(settings: KafkaSettings, pipeline: str, *, wait_s: float = 0.0,
                         on_wait: Callable[[str, float], None] | None = None) -> dict | None:
    """The planner's latest TunerHandoff on the pipeline's control topic, waiting up to ``wait_s`` for
    one when there is none yet (None after that)."""
    records = await read_control(settings, pipeline, "TunerHandoff", wait_s=wait_s, on_wait=on_wait)
    return newest_handoff(records, pipeline)
