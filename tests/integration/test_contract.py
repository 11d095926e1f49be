"""The data contract against the real broker and real worker processes: a request that breaks it gets
an error result naming the field and value, the valid requests beside it in the same window are
served, and every partition's commit point reaches the end (issue 23: fragments ``"abc"`` and
``"1/0"`` used to take their window, and the partition, down)."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from streams import admin, codec, kafka as kclient, topics
from streams.client import PipelineClient, make_request
from streams.spec import load_pipeline

from .helpers import assert_exactly_once, committed_offsets
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
            reqs = [dict(make_request(pipe, b"abc-payload"), fragment="abc"),
                    make_request(pipe, b"valid-in-the-same-window"),
                    dict(make_request(pipe, b"1/0-payload"), fragment="1/0")]
            futs = []
            for r in reqs:
                client.expect(r["request_id"])
                futs.append(await prod.send(src, codec.encode("InferenceRequest", r), key=r["request_id"].encode(),
                                            partition=0))
            await asyncio.gather(*futs)
        finally:
            await prod.stop()
        results = {r["request_id"]: await client.result(r["request_id"], 30) for r in reqs}
        later = [make_request(pipe, f"later-{i}".encode()) for i in range(10)]
        for r in later:
            await client.send(r)
        for r in later:
            assert (await client.result(r["request_id"], 30))["status"] == "done"
    bad_abc, good, bad_div = (results[r["request_id"]] for r in reqs)
    assert good["status"] == "done", good
    for res, value in ((bad_abc, "'abc'"), (bad_div, "'1/0'")):
        assert res["status"] == "error" and f"fragment={value}" in res["reason"], res
    await assert_exactly_once(kafka, pipe.name, [r["request_id"] for r in reqs + later])
    await commits_reach_end(kafka, topics.consumer_group(pipe.name, "pre"), src)
    assert all(w.proc.poll() is None for w in workers.running)
