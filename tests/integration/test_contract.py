"""The data contract against the real broker and real worker processes: a request that breaks it gets
an error result naming the field and value, the valid requests beside it in the same window are
served, and every partition's commit point reaches the end (issue 23: fragments ``"abc"`` and
``"1/0"`` used to take their window, and the partition, down)."""
from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

import pytest

from slipstream.streams import admin, codec, kafka as kclient, topics
from slipstream.streams.client import PipelineClient, make_request
from slipstream.streams.spec import load_pipeline

from .helpers import assert_exactly_once, committed_offsets, read_topic
from .workers import Workers, unique_pipeline

FANOUT3 = Path(__file__).parent / "pipelines" / "fanout3.yaml"


@pytest.fixture
def pipeline(kafka, unique, tmp_path):
    path = unique_pipeline(FANOUT3, unique, tmp_path)
    pipe = load_pipeline(path)
    asyncio.run(admin.ensure_topics(kafka, topics.all_topics(pipe)))
    workers = Workers(path, kafka.bootstrap)
    try:
        workers.start("pre", "detect", "classify", "join")
        yield pipe, workers
    finally:
        workers.stop()


async def commits_reach_end(kafka, group: str, topic: str, timeout_s: float = 30.0) -> None:
    async with asyncio.timeout(timeout_s):
        while True:
            offsets = await committed_offsets(kafka, group, topic)
            if all(c == end for c, end in offsets.values()):
                return
            await asyncio.sleep(0.5)  # faust commits on its own timer: poll the broker


async def test_bad_fragments_get_error_results_and_their_window_is_served(kafka, pipeline):
    pipe, workers = pipeline
    src = topics.stage_input(pipe.name, pipe.source)
    async with PipelineClient(pipe, kafka) as client:
        prod = kclient.producer(kafka, linger_ms=50)  # one burst, one partition: one fetch, one window
        await prod.start()
        try:
            reqs = [replace(make_request(pipe, b"abc-payload"), fragment="abc"),
                    make_request(pipe, b"valid-in-the-same-window"),
                    replace(make_request(pipe, b"1/0-payload"), fragment="1/0")]
            futs = []
            for r in reqs:
                client.expect(r.request_id)
                futs.append(await prod.send(src, codec.encode("InferenceRequest", r), key=r.request_id.encode(),
                                            partition=0))
            await asyncio.gather(*futs)
        finally:
            await prod.stop()
        results = {r.request_id: await client.result(r.request_id, 30) for r in reqs}
        later = [make_request(pipe, f"later-{i}".encode()) for i in range(10)]
        for r in later:
            await client.send(r)
        for r in later:
            assert (await client.result(r.request_id, 30)).status == "done"
    bad_abc, good, bad_div = (results[r.request_id] for r in reqs)
    assert good.status == "done", good
    for res, value in ((bad_abc, "'abc'"), (bad_div, "'1/0'")):
        assert res.status == "error" and f"fragment={value}" in res.reason, res
    await assert_exactly_once(kafka, pipe.name, [r.request_id for r in reqs + later])
    await commits_reach_end(kafka, topics.consumer_group(pipe.name, "pre"), src)
    assert all(w.proc.poll() is None for w in workers.running)


def fragment(pipe, rid: str, share: str, path: list[str], deadline_s: float = 1.0) -> dict:
    now = time.time_ns()
    return {"request_id": rid, "pipeline": pipe.name, "status": "done", "reason": "", "created_ns": now,
            "deadline_ns": now + int(deadline_s * 1e9), "finished_ns": now, "content_type": "text/plain",
            "output": b"x", "hops": [], "accuracy": 1.0, "parts": 1, "fragment": share, "path": path}


async def test_a_fragment_redelivered_after_a_join_restart_opens_no_second_result(kafka, unique, tmp_path):
    path = unique_pipeline(FANOUT3, unique, tmp_path, slo_ms=2000)  # the join times out 2 s after a deadline
    pipe = load_pipeline(path)
    await admin.ensure_topics(kafka, topics.all_topics(pipe))
    workers = Workers(path, kafka.bootstrap)
    join_topic = topics.join(pipe.name)
    prod = kclient.producer(kafka)
    await prod.start()

    async def send(*frags):
        for f in frags:
            await (await kclient.send(prod, join_topic, "InferenceResult", f, key=f["request_id"]))
    try:
        (join,) = await asyncio.to_thread(workers.start, "join")
        async with PipelineClient(pipe, kafka) as client:
            await send(fragment(pipe, "x", "1/2", ["a:0/2"]), fragment(pipe, "x", "1/2", ["a:1/2"]))
            assert (await client.result("x", 30)).status == "done"
            await asyncio.to_thread(join.stop)
            (join,) = await asyncio.to_thread(workers.start, "join")  # a fresh join: nothing in memory
            await send(fragment(pipe, "x", "1/2", ["a:1/2"]),  # redelivered: it used to open x again
                       fragment(pipe, "y", "1", []))
            assert (await client.result("y", 30)).status == "done"
        # x's deadline + the join timeout (3 s) pass well within the quiet time read_topic waits for
        raw = await read_topic(kafka, topics.results(pipe.name), min_count=2, idle_s=6.0)
        assert sorted(r["request_id"] for r in raw) == ["x", "y"], [(r["request_id"], r["reason"]) for r in raw]
        assert join.proc.poll() is None
    finally:
        await prod.stop()
        await asyncio.to_thread(workers.stop)
