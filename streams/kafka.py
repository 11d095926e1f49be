"""Thin aiokafka wrappers: producers and consumers built from KafkaSettings, records through the codec.

Only ``streams/`` imports aiokafka; other layers get clients from here. Every record carries the header
``slipstream-schema`` naming its record type, so a reader of a mixed stream can tell them apart.
"""
from __future__ import annotations

import time
from typing import Any, Mapping

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from streams import codec
from streams.config import KafkaSettings

SCHEMA_HEADER = "slipstream-schema"


def producer(settings: KafkaSettings, **overrides: Any) -> AIOKafkaProducer:
    """Idempotent, acks=all: a write is confirmed once every in-sync replica has it, and a retry after a
    lost acknowledgement is not written twice (the broker drops the sequence number it already has)."""
    kw = dict(acks="all", enable_idempotence=True, linger_ms=1, max_request_size=8 * 1024 * 1024)
    kw.update(overrides)
    return AIOKafkaProducer(**settings.aiokafka_kwargs(), **kw)


def consumer(settings: KafkaSettings, *topics: str, group_id: str | None = None,
             **overrides: Any) -> AIOKafkaConsumer:
    kw = dict(group_id=group_id, auto_offset_reset="earliest", enable_auto_commit=group_id is not None,
              metadata_max_age_ms=5000, fetch_max_wait_ms=50)
    kw.update(overrides)
    return AIOKafkaConsumer(*topics, **settings.aiokafka_kwargs(), **kw)


def headers_for(record: str) -> list[tuple[str, bytes]]:
    return [(SCHEMA_HEADER, record.encode())]


async def send(prod: AIOKafkaProducer, topic: str, record: str, value: Mapping[str, Any],
               key: str | bytes | None = None, timestamp_ns: int | None = None):
    """Encode ``value`` as ``record`` and send it; returns the delivery future (await it to confirm)."""
    if isinstance(key, str):
        key = key.encode()
    ts_ms = (timestamp_ns if timestamp_ns is not None else time.time_ns()) // 1_000_000
    return await prod.send(topic, codec.encode(record, value), key=key, timestamp_ms=ts_ms,
                           headers=headers_for(record))


async def topic_partitions(consumer, topic: str) -> list:
    """Every partition of ``topic`` (after a metadata fetch if the client has not seen it yet)."""
    from aiokafka import TopicPartition

    parts = consumer.partitions_for_topic(topic)
    for _ in range(50):
        if parts:
            break
        # first lookup of a topic: track it (a consumer subscribed to other topics fetches metadata of
        # those only) and fetch metadata
        await consumer._client.add_topic(topic)
        await consumer._client.force_metadata_update()
        parts = consumer.partitions_for_topic(topic)
    if not parts:
        raise LookupError(f"topic {topic} does not exist: create the pipeline's topics first")
    return [TopicPartition(topic, p) for p in sorted(parts)]


def is_transient(exc: BaseException) -> bool:
    """Will sending again help? Broker-side retriable errors, timeouts and lost connections: yes; a
    record too large, an unknown topic or an encode error: no."""
    from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError

    return bool(getattr(exc, "retriable", False)) or isinstance(exc, (KafkaTimeoutError, KafkaConnectionError))
