"""Exactly-once processing on the real broker (``processing: exactly-once``, ``slipstream.agents.transactions``):
a window's outputs and its input offsets commit in one transaction, readers read committed only.

- stage workers killed with SIGKILL mid-stream under load, and the join, restart, and the results
  topic read back (read committed) holds every request exactly once with one status;
- a zombie is fenced: once the next owner of a partition has started its producer, the old
  producer's transaction cannot commit, and neither its outputs nor its offsets become visible.
"""
from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import replace

import pytest

from slipstream.agents.acks import Release
from slipstream.agents.routing import Out, ended
from slipstream.agents.transactions import PartitionTransactions, transactional_id
from slipstream.loadgen.collect import check_exactly_once
from slipstream.streams import admin, codec, kafka as kclient, topics
from slipstream.streams.client import PipelineClient, make_request
from slipstream.streams.config import EXACTLY_ONCE, KafkaSettings
from slipstream.streams.spec import load_pipeline

from .helpers import as_records, assigned, committed_offsets, poisson_open_loop, read_topic
from .test_data_plane import FANOUT3, collect, fanout3_with_workers, send_all
from .workers import Workers, unique_pipeline

EOS = {"SLIPSTREAM_PROCESSING": EXACTLY_ONCE}


@pytest.fixture
def eos_pipeline(kafka, unique, tmp_path):
    yield from fanout3_with_workers(kafka, unique, tmp_path, EOS)


async def test_exactly_once_fanout_delivers_each_request_once_and_commits_through_transactions(
        kafka, eos_pipeline):
    pipe, _ = eos_pipeline
    async with PipelineClient(pipe, kafka) as client:
        ids = await send_all(client, pipe, 60)
        results = await collect(client, ids)
    assert all(r.status == "done" for r in results.values())
    raw = await read_topic(kafka, topics.results(pipe.name), min_count=len(ids), short_ok=True)
    d = check_exactly_once(as_records(raw), ids)
    assert d.exactly_once, str(d)
    # faust commits nothing here (the source topics have acks off): every input offset the groups have
    # committed was committed by a transaction, one past the last record of each input partition
    for stage, topic in [(s, topics.stage_input(pipe.name, s)) for s in ("pre", "detect", "classify")] + \
            [("join", topics.join(pipe.name))]:
        offsets = await committed_offsets(kafka, topics.consumer_group(pipe.name, stage), topic)
        last = await last_record_offsets(kafka, topic)
        assert {p: c for p, (c, _) in offsets.items() if p in last} == {p: o + 1 for p, o in last.items()}, stage


async def last_record_offsets(kafka, topic: str) -> dict[int, int]:
    """Per partition with records: the offset of its last record (a topic written in transactions ends
    with a commit marker, which takes an offset of its own, so this is not the end offset minus one)."""
    async with assigned(kafka, topic) as (cons, tps, ends):
        await cons.seek_to_beginning(*tps)
        last: dict[int, int] = {}
        async with asyncio.timeout(30):
            while [tp for tp in tps if await cons.position(tp) < ends[tp]]:
                for tp, ms in (await cons.getmany(timeout_ms=300)).items():
                    last[tp.partition] = ms[-1].offset
        return last


def _kill(proc) -> None:
    os.kill(proc.proc.pid, signal.SIGKILL)
    proc.proc.wait()


async def test_workers_killed_mid_window_under_load_restart_and_every_request_ends_exactly_once(
        kafka, unique, tmp_path):
    path = unique_pipeline(FANOUT3, unique, tmp_path)
    pipe = load_pipeline(path)
    await admin.ensure_topics(kafka, topics.all_topics(pipe))
    workers = Workers(path, kafka.bootstrap, EOS)
    n, rate = 400, 40.0
    try:
        started = {s: w for s, w in zip(("pre", "detect", "classify", "join"),
                                        workers.start("pre", "detect", "classify", "join"))}
        async with PipelineClient(pipe, kafka) as client:
            ids: list[str] = []

            # Poisson arrivals: the workers are busy when they are killed
            sender = asyncio.create_task(poisson_open_loop(client, pipe, n, rate, 11, ids))
            t0 = time.monotonic()
            for stage, at_s in (("detect", 2.0), ("join", 4.0), ("classify", 6.0)):  # while sending (10 s)
                await asyncio.sleep(max(0.0, t0 + at_s - time.monotonic()))
                _kill(started[stage])
                workers.start(stage, wait=False)  # restarted at once, as the supervisor would
            await sender
            results = await collect(client, ids, timeout_s=120)
        assert set(results) == set(ids)
        raw = await read_topic(kafka, topics.results(pipe.name), min_count=len(ids), idle_s=3.0, short_ok=True)
        d = check_exactly_once(as_records(raw), ids)
        assert (d.missing, d.duplicates, d.conflicting, d.unexpected) == ((), (), (), ()), str(d)
    finally:
        workers.stop()


async def test_a_zombie_producer_is_fenced_and_its_outputs_and_offsets_never_commit(kafka, unique, tmp_path):
    path = unique_pipeline(FANOUT3, unique, tmp_path)
    pipe = load_pipeline(path)
    await admin.ensure_topics(kafka, topics.all_topics(pipe))
    settings = KafkaSettings(bootstrap=kafka.bootstrap, processing=EXACTLY_ONCE)
    group, src = topics.consumer_group(pipe.name, "pre"), topics.stage_input(pipe.name, "pre")
    tp = (src, 0)

    def result(rid: str) -> Out:
        req = replace(make_request(pipe, b"x"), request_id=rid)
        return ended(pipe, req, "done", "", time.time_ns())

    # the zombie: mid-window, its outputs are in the log (uncommitted) and its offsets are added
    zombie = kclient.transactional_producer(settings, transactional_id(group, src, 0))
    await zombie.start()
    new = PartitionTransactions(settings, group, pipe, "pre")
    try:
        await zombie.begin_transaction()
        z = result("zombie")
        await (await kclient.send(zombie, z.topic, z.record, z.value, key=z.key))
        await kclient.send_offsets(zombie, {tp: 5}, group)
        await new.open([tp])  # the partition's next owner (a restart, or a rebalance) starts its producer
        with pytest.raises(Exception) as exc:
            await zombie.commit_transaction()
        assert kclient.is_fenced(exc.value), repr(exc.value)
        assert await new.commit([Release(tp, ["e0"], [(result("new-owner"), None)], 1)])
        # a fenced PartitionTransactions drops what it had not committed (its events stay unacked); the
        # partition still assigned to it (the fencing producer a stale start elsewhere), it asks its
        # consumer to read the partition again, so the partition is not left unread
        reread: list = []

        async def on_reread(tp_):
            reread.append(tp_)

        new.on_reread = on_reread
        newer = PartitionTransactions(settings, group, pipe, "pre")
        await newer.open([tp])
        assert await new.commit([Release(tp, ["e1"], [(result("fenced"), None)], 2)]) == []
        assert reread == [tp]
        await newer.close_all()
    finally:
        await zombie.stop()
        await new.close_all()
    raw = await read_topic(kafka, topics.results(pipe.name), min_count=1, idle_s=2.0)
    assert [r["request_id"] for r in raw] == ["new-owner"]  # read committed
    assert (await committed_offsets(kafka, group, src))[0][0] == 1  # not the zombie's 5
    # the zombie's record did reach the log and was aborted: a read_uncommitted reader sees it
    cons = kclient.consumer(kafka, topics.results(pipe.name), group_id=None, isolation_level="read_uncommitted")
    await cons.start()
    seen: list[str] = []
    try:
        async with asyncio.timeout(10):
            while "zombie" not in seen:
                for ms in (await cons.getmany(timeout_ms=300)).values():
                    seen += [codec.decode_typed("InferenceResult", m.value).request_id for m in ms]
    finally:
        await cons.stop()
    assert "zombie" in seen and "fenced" not in seen, seen
