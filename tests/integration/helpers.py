"""Reading topics back in the integration tests, and the exactly-once check every results test runs."""
from __future__ import annotations

import asyncio
import os
import time
from contextlib import asynccontextmanager
from typing import Iterable

import numpy as np
from aiokafka import TopicPartition
from aiokafka.structs import OffsetAndMetadata

from slipstream.loadgen.collect import Delivery, check_exactly_once
from slipstream.loadgen.trail import describe, trail
from slipstream.schemas.records import InferenceResult
from slipstream.streams import codec, kafka as kclient, topics
from slipstream.streams.client import PipelineClient, make_request


async def drain(settings, topic: str, n: int, timeout_s: float = 30.0) -> list:
    """The first ``n`` records of ``topic`` (raw aiokafka records), from the beginning."""
    cons = kclient.consumer(settings, topic, group_id=None)
    await cons.start()
    got = []
    try:
        async with asyncio.timeout(timeout_s):
            while len(got) < n:
                for records in (await cons.getmany(timeout_ms=300)).values():
                    got.extend(records)
    finally:
        await cons.stop()
    return got


async def read_topic(kafka, topic: str, min_count: int, record: str = "InferenceResult",
                     idle_s: float = 2.0, give_up_s: float = 60.0, short_ok: bool = False) -> list[dict]:
    """Every record of ``topic``, decoded: at least ``min_count``, then until it is quiet for
    ``idle_s`` (so late duplicates are read too). Still short of ``min_count`` after ``give_up_s`` of
    quiet: TimeoutError, or what there is if ``short_ok``."""
    cons = kclient.consumer(kafka, topic, group_id=None)
    await cons.start()
    out = []
    try:
        quiet_since = time.monotonic()
        while len(out) < min_count or time.monotonic() - quiet_since < idle_s:
            batch = await cons.getmany(timeout_ms=300)
            await codec.prefetch(m.value for ms in batch.values() for m in ms)  # a registry's ids, off the loop
            got = [codec.decode(record, m.value) for ms in batch.values() for m in ms]
            if got:
                out += got
                quiet_since = time.monotonic()
            elif len(out) < min_count and time.monotonic() - quiet_since > give_up_s:
                if short_ok:
                    break
                raise TimeoutError(f"{topic}: {len(out)} of {min_count} records")
    finally:
        await cons.stop()
    return out


async def results_of(client: PipelineClient, ids: list[str], timeout_s: float) -> list[InferenceResult]:
    """The results of ``ids``, in their order; AssertionError naming where each request without one
    went (``slipstream.loadgen.trail``) if any has none within ``timeout_s``."""
    got = await asyncio.gather(*[client.result(i, timeout_s) for i in ids], return_exceptions=True)
    missing = [i for i, res in zip(ids, got) if isinstance(res, TimeoutError)]
    if missing:
        where = describe(await trail(client.kafka, client.pipe, missing[:20]))
        raise AssertionError(f"{len(missing)} of {len(ids)} requests unanswered within {timeout_s:g} s:\n{where}")
    for res in got:
        if isinstance(res, BaseException):
            raise res
    return got


def as_records(raw: Iterable[dict]) -> list[InferenceResult]:
    """Decoded results (:func:`read_topic`) as the records the exactly-once check takes."""
    return [InferenceResult.from_dict(r) for r in raw]


async def assert_exactly_once(kafka, pipeline: str, sent: Iterable[str]) -> list[dict]:
    """Read the pipeline's whole results topic back and assert one result per request sent: none
    missing, none duplicated, none foreign. Returns the records read."""
    sent = list(sent)
    raw = await read_topic(kafka, topics.results(pipeline), min_count=len(sent), short_ok=True)
    delivery: Delivery = check_exactly_once(as_records(raw), sent)
    assert delivery.exactly_once, str(delivery)
    return raw


@asynccontextmanager
async def assigned(kafka, topic: str, group: str | None = None):
    """A consumer (of ``group``, never committing) assigned every partition of ``topic``: (consumer,
    partitions, end offsets)."""
    cons = kclient.consumer(kafka, group_id=group, enable_auto_commit=False)
    await cons.start()
    try:
        tps = await kclient.topic_partitions(cons, topic)
        cons.assign(tps)
        yield cons, tps, await cons.end_offsets(tps)
    finally:
        await cons.stop()


async def commit(kafka, group: str, topic: str, partition: int, offset: int) -> None:
    """``group``'s committed offset on ``topic[partition]``, set as a worker's commit would."""
    cons = kclient.consumer(kafka, group_id=group, enable_auto_commit=False)
    await cons.start()
    try:
        tp = TopicPartition(topic, partition)
        cons.assign([tp])
        await cons.commit({tp: OffsetAndMetadata(offset, "")})
    finally:
        await cons.stop()


async def committed_offsets(kafka, group: str, topic: str) -> dict[int, tuple[int | None, int]]:
    """Per partition of ``topic``: (the group's committed offset or None, the end offset)."""
    async with assigned(kafka, topic, group) as (cons, tps, ends):
        return {tp.partition: (await cons.committed(tp), ends[tp]) for tp in tps}


async def poisson_open_loop(client, pipe, n: int, rate_qps: float, seed: int, ids: list[str]) -> None:
    """Send ``n`` requests of random bytes at seeded Poisson arrivals of ``rate_qps``, open loop (each at
    its time, answered or not), appending each request id to ``ids`` as it is sent; returns when the
    broker has acknowledged every send."""
    t0, futs = time.monotonic(), []
    for at in np.cumsum(np.random.default_rng(seed).exponential(1 / rate_qps, n)):
        await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
        req = make_request(pipe, os.urandom(16))
        ids.append(req.request_id)
        futs.append(await client.send(req, wait=False))
    await asyncio.gather(*futs)
