"""The foundation against a real broker: topics, partition growth, Avro through the codec, bad bytes,
schema evolution."""
from __future__ import annotations

import asyncio
import copy
import json
import uuid

import fastavro
import pytest

from slipstream import schemas
from slipstream.streams import admin, codec, kafka as kclient
from slipstream.streams.codec import CodecError, RecordCodec
from slipstream.streams.topics import TopicSpec

from .helpers import drain


def request(i: int) -> dict:
    return {"request_id": f"r{i}", "pipeline": "p", "created_ns": 1_000 + i, "deadline_ns": 2_000 + i,
            "accuracy_floor": 0.7 if i % 2 else None, "content_type": "application/octet-stream",
            "payload": bytes([i % 256]) * (i % 50)}


async def test_create_topic_and_grow_partitions(kafka, unique):
    topic = f"{unique}.grow"
    created = await admin.ensure_topics(kafka, [TopicSpec(topic, 2)])
    assert created == [topic]
    assert await admin.ensure_topics(kafka, [TopicSpec(topic, 2)]) == []  # idempotent
    assert (await admin.partition_counts(kafka, [topic]))[topic] == 2
    assert await admin.grow_partitions(kafka, topic, 6) == 6
    assert (await admin.partition_counts(kafka, [topic]))[topic] == 6
    assert await admin.grow_partitions(kafka, topic, 3) == 6  # partitions only grow


async def test_avro_requests_round_trip_nothing_lost(kafka, unique):
    topic = f"{unique}.requests"
    await admin.ensure_topics(kafka, [TopicSpec(topic, 4)])
    prod = kclient.producer(kafka)
    await prod.start()
    n = 500
    try:
        futures = [await kclient.send(prod, topic, "InferenceRequest", request(i), key=f"r{i}")
                   for i in range(n)]
        await asyncio.gather(*futures)
    finally:
        await prod.stop()
    records = await drain(kafka, topic, n)
    decoded = [codec.decode("InferenceRequest", r.value) for r in records]
    assert sorted(d["request_id"] for d in decoded) == sorted(f"r{i}" for i in range(n))
    by_id = {d["request_id"]: d for d in decoded}
    for i in range(n):
        want = request(i)
        got = by_id[f"r{i}"]
        assert {k: got[k] for k in want} == want
        assert got["hops"] == [] and got["fragment"] == "1"  # defaults filled in
    assert all(dict(r.headers)[kclient.SCHEMA_HEADER] == b"InferenceRequest" for r in records)


async def test_garbage_payload_rejected_with_clear_error(kafka, unique):
    topic = f"{unique}.garbage"
    await admin.ensure_topics(kafka, [TopicSpec(topic, 1)])
    prod = kclient.producer(kafka)
    await prod.start()
    try:
        await (await prod.send(topic, b"\x00not avro at all"))
        good = codec.encode("InferenceRequest", request(1))
        await (await prod.send(topic, good[:-3]))  # truncated
    finally:
        await prod.stop()
    records = await drain(kafka, topic, 2)
    with pytest.raises(CodecError, match="single-object header C3 01"):
        codec.decode("InferenceRequest", records[0].value)
    with pytest.raises(CodecError, match="truncated|undecodable"):
        codec.decode("InferenceRequest", records[1].value)


def evolved_request_schema() -> dict:
    """InferenceRequest plus a new trailing field with a default: the allowed kind of change."""
    raw = copy.deepcopy(schemas.raw("InferenceRequest"))
    raw["fields"].append({"name": "priority", "type": "int", "default": 0})
    named: dict = {}
    fastavro.parse_schema(schemas.raw("HopTiming"), named_schemas=named)
    return fastavro.parse_schema(raw, named_schemas=named)


async def test_schema_evolution_round_trip(kafka, unique):
    topic = f"{unique}.evolve"
    await admin.ensure_topics(kafka, [TopicSpec(topic, 1)])
    new = RecordCodec("InferenceRequest", evolved_request_schema())
    new.add_writer(schemas.load("InferenceRequest"))  # the new reader knows the old generation
    old = RecordCodec("InferenceRequest", schemas.load("InferenceRequest"))
    prod = kclient.producer(kafka)
    await prod.start()
    try:
        await (await prod.send(topic, new.encode({**request(7), "priority": 5})))
        await (await prod.send(topic, old.encode(request(8))))
    finally:
        await prod.stop()
    r_new, r_old = await drain(kafka, topic, 2)
    # old reader, new writer: refused naming the writer's fingerprint (never read with the reader's own
    # schema), until the reader is given the writer's schema; then resolved, the new field skipped
    with pytest.raises(CodecError, match=f"unknown writer schema, fingerprint {new.fp.hex()}"):
        old.decode(r_new.value)
    old.add_writer(evolved_request_schema())
    v = old.decode(r_new.value)
    assert v["request_id"] == "r7" and "priority" not in v
    # new reader, old writer: the default fills the new field
    w = new.decode(r_old.value)
    assert w["request_id"] == "r8" and w["priority"] == 0
    # new reader, new writer
    assert new.decode(r_new.value)["priority"] == 5


async def test_a_session_timeout_outside_the_brokers_bounds_is_fitted_to_them(kafka):
    from dataclasses import replace

    low = (await admin.fit_session_timeout(replace(kafka, session_timeout_s=0.001))).session_timeout_s
    assert low in (1.0, 6.0)  # the local broker's group.min.session.timeout.ms, or Kafka's default
    assert (await admin.fit_session_timeout(replace(kafka, session_timeout_s=3600))).session_timeout_s == 1800.0
    inside = replace(kafka, session_timeout_s=max(low, 2.5))
    assert await admin.fit_session_timeout(inside) == inside
