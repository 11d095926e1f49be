"""Growing a stage's input topic under load loses nothing: while requests flow, every stage's input topic
goes from 2 to 4 partitions (what the tuner does when it scales a stage past its partitions,
``slipstream.streams.admin.grow_partitions``). The producers upstream start writing to the new
partitions once their metadata shows them, possibly before any member of the stage's group holds
them; the group must still read them from their first offset. Every request must end on the results
topic exactly once, done, in either processing mode.

A Kubernetes run once lost a request written at offset 0 of a grown partition (docs/kubernetes.md,
section 10); this is the same growth on local processes, with the upstream producers and the groups
learning of the new partitions at their own metadata refreshes. The loss came from faust's rewind,
which left a partition without a committed offset where a dropped fetch had taken it; the second
test rewinds one directly."""
from __future__ import annotations

import asyncio

import pytest
from aiokafka import TopicPartition

from slipstream.agents.intake import use_bulk_intake
from slipstream.streams import admin, kafka as kclient, topics
from slipstream.streams.app import AppSettings, make_app
from slipstream.streams.client import PipelineClient
from slipstream.streams.config import AT_LEAST_ONCE, EXACTLY_ONCE

from .helpers import assert_exactly_once, commit
from .test_data_plane import collect, fanout3_with_workers
from .test_rebalance import send_until

GROWN = 4


@pytest.fixture(params=[AT_LEAST_ONCE, EXACTLY_ONCE])
def pipeline(request, kafka, unique, tmp_path):
    yield from fanout3_with_workers(kafka, unique, tmp_path, {"SLIPSTREAM_PROCESSING": request.param})


async def records_in(kafka, topic: str, partitions: range) -> int:
    """Records written to ``partitions`` of ``topic`` (their end offsets)."""
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


async def write(kafka, topic: str, counts: dict[int, int]) -> None:
    """``counts[p]`` records to each partition ``p`` of ``topic``."""
    prod = kclient.producer(kafka)
    await prod.start()
    try:
        for p, n in counts.items():
            await asyncio.gather(*[await prod.send(topic, b"x", partition=p) for _ in range(n)])
    finally:
        await prod.stop()


def reading_app(kafka, group: str, topic: str):
    """A faust app of the project's (``make_app``) whose bulk reader of ``topic`` is a :class:`Seen`."""
    app = make_app(AppSettings(group, kafka))
    seen = Seen()
    use_bulk_intake(app, {topic: seen})

    @app.agent(app.topic(topic, acks=False), concurrency=1)
    async def agent(stream):  # subscribes the topic; its records reach ``seen`` in bulk
        async for _ in stream.noack().events():
            pass

    return app, seen


class Seen:
    """A bulk reader (``slipstream.agents.intake``) that notes the offsets it is handed; ``waiting``: set
    once each of ``want`` ((partition, offset) pairs) was handed over since :meth:`expect`."""

    def __init__(self) -> None:
        self.room = asyncio.Event()
        self.room.set()
        self.want: set = set()
        self.waiting = asyncio.Event()
        self.log: list = []  # (partition, offset) of every record handed over, in order

    def expect(self, want: set) -> asyncio.Event:
        self.want, self.waiting = set(want), asyncio.Event()
        return self.waiting

    def on_records(self, tp, records: list) -> None:
        self.log += [(tp.partition, r.offset) for r in records]
        self.want -= {(tp.partition, r.offset) for r in records}
        if not self.want:
            self.waiting.set()

    def committable(self, tp) -> None:
        return None  # commits nothing: what the group has committed stays as the test set it

    async def handed(self, waiting: asyncio.Event, timeout_s: float) -> None:
        try:
            await asyncio.wait_for(waiting.wait(), timeout_s)
        except TimeoutError:
            raise AssertionError(f"never handed over, as (partition, offset): {sorted(self.want)}") from None


async def test_a_rewind_reads_a_partition_without_a_committed_offset_from_its_first_record(kafka, unique):
    """faust rewinds every partition to its committed offset after a rebalance and whenever a fetch
    comes back while its flow is stopped (it drops that fetch). A partition without a committed offset
    (grown, or new to the group) must go back to its first record too: left where the dropped fetch
    had taken it, its head was skipped (the loss ``test_partitions_grown_under_load...`` caught in CI)."""
    await admin.ensure_topics(kafka, [topics.TopicSpec(unique, 2)])
    await write(kafka, unique, {0: 10, 1: 10})
    group = f"{unique}-group"
    await commit(kafka, group, unique, 0, 5)  # partition 0 has a committed offset (5); partition 1 has none
    app, seen = reading_app(kafka, group, unique)
    everything = {(0, o) for o in range(5, 10)} | {(1, o) for o in range(10)}
    first = seen.expect(everything)
    await app.start()
    try:
        await seen.handed(first, 60)
        again = seen.expect(everything)  # the rewind: both partitions from where the group stands
        await app.consumer.perform_seek()
        await seen.handed(again, 30)
    finally:
        await app.stop()


async def test_a_record_handed_over_is_not_handed_over_again_when_the_fetcher_goes_back(kafka, unique):
    """Records drained from the fetcher while a rewind runs can reach the worker after it, and the
    fetcher then returns them again: the read offset (one past the last record handed over) keeps
    the second copy from the worker."""
    await admin.ensure_topics(kafka, [topics.TopicSpec(unique, 1)])
    await write(kafka, unique, {0: 10})
    app, seen = reading_app(kafka, f"{unique}-group", unique)
    first = seen.expect({(0, o) for o in range(10)})
    await app.start()
    try:
        await seen.handed(first, 60)
        then = seen.expect({(0, o) for o in range(10, 15)})
        app.consumer._thread.seek(TopicPartition(unique, 0), 0)  # back, as a rewind would, unknown to faust
        await write(kafka, unique, {0: 5})
        await seen.handed(then, 30)
    finally:
        await app.stop()
    assert seen.log == [(0, o) for o in range(15)]
