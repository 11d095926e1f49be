"""A missing request's trail (``slipstream.loadgen.trail``) against the broker: a request on the source
stage's input topic that the stage's group has committed past reads as taken by a worker; one the
group has not reached reads as waiting; one never sent reads as on no topic."""
from __future__ import annotations

import asyncio
from pathlib import Path

from slipstream.loadgen.trail import describe, trail
from slipstream.streams import admin, topics
from slipstream.streams.client import PipelineClient, make_request
from slipstream.streams.spec import load_pipeline

from .helpers import commit
from .workers import unique_pipeline

FANOUT3 = Path(__file__).parent / "pipelines" / "fanout3.yaml"


def test_the_trail_tells_a_taken_request_from_a_waiting_and_an_unsent_one(kafka, unique, tmp_path):
    pipe = load_pipeline(unique_pipeline(FANOUT3, unique, tmp_path))
    asyncio.run(admin.ensure_topics(kafka, topics.all_topics(pipe)))
    source = topics.stage_input(pipe.name, pipe.source)

    async def run():
        async with PipelineClient(pipe, kafka) as client:
            taken, waiting = make_request(pipe, b"a"), make_request(pipe, b"b")
            await client.send(taken)
            await client.send(waiting)
        found = await trail(kafka, pipe, [taken.request_id], 0)
        (first,) = found[taken.request_id]
        await commit(kafka, topics.consumer_group(pipe.name, pipe.source), source, first.partition, first.offset + 1)
        ids = [taken.request_id, waiting.request_id, "never-sent"]
        return ids, await trail(kafka, pipe, ids, 0)

    (taken, waiting, unsent), found = asyncio.run(run())
    (t,) = found[taken]
    assert (t.topic, t.committed) == (source, t.offset + 1)
    (w,) = found[waiting]
    assert w.topic == source
    assert w.committed is None or w.committed <= w.offset  # same partition: the group stands at or before it
    assert found[unsent] == []
    text = describe(found)
    assert "committed past it" in text.splitlines()[0]
    assert "on no topic" in text.splitlines()[2]
