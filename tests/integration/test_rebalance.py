"""Rebalances under load lose and duplicate nothing: while requests flow, a second worker of a stage
and a second join worker join their consumer groups (partitions move to them), then the first ones
leave (their partitions move back). Every request must end on the results topic exactly once.

The workers' periodic commit is made longer than the test (``--commit-interval-s``), so only the
workers' own commits at revocation (stage worker and join) keep the new owners from redoing work:
without either, requests finished before a rebalance are redone and their results duplicated."""
from __future__ import annotations

import asyncio

import pytest

from slipstream.streams.client import PipelineClient, make_request

from .helpers import assert_exactly_once
from .test_data_plane import collect, fanout3_with_workers

RATE_QPS = 25.0


@pytest.fixture
def pipeline(kafka, unique, tmp_path):
    yield from fanout3_with_workers(kafka, unique, tmp_path, env={"SLIPSTREAM_COMMIT_INTERVAL_S": "3600"})


async def send_until(client: PipelineClient, pipe, ids: list[str], stop: asyncio.Event) -> None:
    """Open loop at RATE_QPS until ``stop`` is set."""
    loop = asyncio.get_running_loop()
    t0, futs = loop.time(), []
    while not stop.is_set():
        req = make_request(pipe, f"payload-{len(ids)}".encode())
        ids.append(req.request_id)
        futs.append(await client.send(req, wait=False))
        try:
            await asyncio.wait_for(stop.wait(), max(t0 + len(ids) / RATE_QPS - loop.time(), 0))
        except TimeoutError:
            pass
    await asyncio.gather(*futs)


async def test_rebalances_of_a_stage_and_the_join_under_load_lose_and_duplicate_nothing(kafka, pipeline):
    pipe, workers = pipeline
    first_classify, first_join = workers.running[2], workers.running[3]
    async with PipelineClient(pipe, kafka) as client:
        ids: list[str] = []
        stop = asyncio.Event()
        sender = asyncio.create_task(send_until(client, pipe, ids, stop))
        # each waits until the newcomer holds partitions, i.e. the rebalance is done
        await asyncio.to_thread(workers.start, "classify", "join")
        before = len(ids)
        await asyncio.to_thread(first_classify.stop)  # graceful: revocation commits what it finished
        await asyncio.to_thread(first_join.stop)
        stop.set()
        await sender
        results = await collect(client, ids, timeout_s=90)
        assert client.duplicates == 0
    assert 0 < before < len(ids)  # requests were in flight across both rebalances
    assert all(r.status == "done" for r in results.values()), \
        {r.status: r.reason for r in results.values() if r.status != "done"}
    await assert_exactly_once(kafka, pipe.name, ids)
