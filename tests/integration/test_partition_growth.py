"""Growing a stage's input topic under load loses nothing: while requests flow, every stage's input topic
goes from 2 to 4 partitions (what the tuner does when it scales a stage past its partitions,
``slipstream.streams.admin.grow_partitions``). The producers upstream start writing to the new
partitions once their metadata shows them, possibly before any member of the stage's group holds
them; the group must still read them from their first offset. Every request must end on the results
topic exactly once, done.

A Kubernetes run once lost a request written at offset 0 of a grown partition (docs/kubernetes.md,
section 10); this is the same growth on local processes, with the upstream producers and the groups
learning of the new partitions at their own metadata refreshes."""
from __future__ import annotations

import asyncio

import pytest

from slipstream.streams import admin, kafka as kclient, topics
from slipstream.streams.client import PipelineClient

from .helpers import assert_exactly_once
from .test_data_plane import collect, fanout3_with_workers
from .test_rebalance import send_until

GROWN = 4


@pytest.fixture
def pipeline(kafka, unique, tmp_path):
    yield from fanout3_with_workers(kafka, unique, tmp_path)


async def records_in(kafka, topic: str, partitions: range) -> int:
    """Records written to ``partitions`` of ``topic`` (their end offsets)."""
    from aiokafka import TopicPartition

    cons = kclient.consumer(kafka, topic, group_id=None)
    await cons.start()
    try:
        return sum((await cons.end_offsets([TopicPartition(topic, p) for p in partitions])).values())
    finally:
        await cons.stop()


async def test_partitions_grown_under_load_are_read_from_their_first_record(kafka, pipeline):
    pipe, _workers = pipeline
    grown = [topics.stage_input(pipe.name, s.name) for s in pipe.stages]
    async with PipelineClient(pipe, kafka) as client:
        ids: list[str] = []
        stop = asyncio.Event()
        sender = asyncio.create_task(send_until(client, pipe, ids, stop))
        await asyncio.sleep(3.0)  # traffic on the old partitions first
        before = len(ids)
        for topic in grown:
            assert await admin.grow_partitions(kafka, topic, GROWN) == GROWN
        # long enough for the producers' and the groups' metadata (5 s) to show the new partitions
        await asyncio.sleep(15.0)
        stop.set()
        await sender
        results = await collect(client, ids, timeout_s=90)
        assert client.duplicates == 0
    assert 0 < before < len(ids)
    assert all(r.status == "done" for r in results.values()), \
        {r.status: r.reason for r in results.values() if r.status != "done"}
    await assert_exactly_once(kafka, pipe.name, ids)
    # the producers upstream (the client's, the workers') wrote the new partitions within the run:
    # with aiokafka's default metadata age (5 min) they kept writing the old ones only
    written = {topic: await records_in(kafka, topic, range(2, GROWN)) for topic in grown}
    assert all(written.values()), written
