"""The at-least-once join writes through the stage workers' delivery path (``slipstream.agents.delivery``), on
the real broker with a real join worker: a joined result the broker refuses (the results topic's
``max.message.bytes`` lowered while the join runs, so its own size check still lets it through) is
answered once, with an error result, never dropped; and the results after it, on the partitions of
the refused batch too, are written by a new producer. A refill of the join's memory that fails
leaves the join not ready, saying why."""
from __future__ import annotations

import asyncio

from slipstream.agents.join import Joiner
from slipstream.agents.join_worker import JOIN, JoinWorker
from slipstream.agents.metrics import StageMetrics
from slipstream.agents.ready import Readiness
from slipstream.streams import admin, kafka as kclient, topics
from slipstream.streams.client import PipelineClient
from slipstream.streams.spec import load_pipeline

from .helpers import assert_exactly_once
from .test_contract import FANOUT3, fragment
from .test_transaction_faults import set_topic_limit
from .workers import Workers, unique_pipeline


async def test_a_joined_result_the_broker_refuses_is_answered_once_with_an_error(kafka, unique, tmp_path):
    path = unique_pipeline(FANOUT3, unique, tmp_path, slo_ms=60000)  # no timeout while the test runs
    pipe = load_pipeline(path)
    await admin.ensure_topics(kafka, topics.all_topics(pipe))
    workers = Workers(path, kafka.bootstrap)
    prod = kclient.producer(kafka)
    await prod.start()

    async def join(client, rid: str, output: bytes = b"x") -> None:
        client.expect(rid)  # its result is kept however soon it comes
        for share, p in (("1/2", ["a:0/2"]), ("1/2", ["a:1/2"])):
            f = {**fragment(pipe, rid, share, p, deadline_s=60), "output": output}
            await (await kclient.send(prod, topics.join(pipe.name), "InferenceResult", f, key=rid))
    try:
        (worker,) = await asyncio.to_thread(workers.start, "join")
        before, after = [f"before-{i}" for i in range(12)], [f"after-{i}" for i in range(12)]
        async with PipelineClient(pipe, kafka) as client:
            for rid in before:  # every results partition now holds a batch of the join's producer
                await join(client, rid)
            for rid in before:
                await client.result(rid, 30)
            await set_topic_limit(kafka, topics.results(pipe.name), 20_000)  # the join read 1 MiB at start
            await join(client, "big", b"y" * 12_000)  # two parts: over 20 kB joined
            assert (await client.result("big", 60)).status == "error"
            for rid in after:
                await join(client, rid)
            for rid in after:
                assert (await client.result(rid, 60)).status == "done"
        got = {r["request_id"]: r for r in await assert_exactly_once(kafka, pipe.name, before + ["big"] + after)}
        assert "MessageSizeTooLarge" in got["big"]["reason"], got["big"]["reason"]
        assert worker.proc.poll() is None
    finally:
        await prod.stop()
        await asyncio.to_thread(workers.stop)
        print("".join(line for w in workers.running for line in w.lines)[-4000:])  # shown on failure


async def test_a_refill_that_fails_leaves_the_join_not_ready_saying_why_until_one_succeeds(kafka, unique, tmp_path):
    pipe = load_pipeline(unique_pipeline(FANOUT3, unique, tmp_path))
    await admin.ensure_topics(kafka, topics.all_topics(pipe))
    worker = JoinWorker(pipe, kafka, Joiner(10**9), StageMetrics.create(pipe.name, JOIN, pipe.slo_ms))
    ready = Readiness(None, lambda: worker.not_ready)
    ready.partitions = 2
    worker.refill_s = 0  # the results topic not read back within the bound
    await worker.on_assigned(set())
    assert ready.reason().startswith("join memory not refilled"), ready.reason()
    worker.refill_s = 60
    await worker.on_assigned(set())  # the next assignment's refill succeeds
    assert ready.reason() is None
