"""A stage worker survives its own delivery failures, on the real broker: an output the broker refuses
(a resized image over the broker's 1 MiB record limit) becomes an ``error`` result naming why, for
that request only; requests before and after it are done, each ends exactly once, and the worker
keeps running and committing past all of them."""
from __future__ import annotations

import asyncio
import io
from pathlib import Path

import yaml
from PIL import Image

from slipstream.streams import admin, topics
from slipstream.streams.client import PipelineClient, make_request
from slipstream.streams.spec import load_pipeline

from .helpers import assert_exactly_once, committed_offsets
from .workers import Workers


def resize_pipeline(name: str, folder: Path) -> Path:
    """One image-resize stage whose variants emit 64x64 (small) or 700x700 raw RGB (1.47 MB: over the
    broker's default 1 MiB message.max.bytes); requests pick the big one with an accuracy floor."""
    doc = {"name": name, "slo_ms": 20000, "input_content_type": "image/png",
           "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
           "stages": [{"name": "resize",
                       "variants": [{"name": "small", "model": "image-resize", "accuracy": 0.5, "params": {"size": 64}},
                                    {"name": "big", "model": "image-resize", "accuracy": 0.9, "params": {"size": 700}}],
                       "defaults": {"variant": "small", "max_batch": 1, "batch_timeout_ms": 1, "partitions": 1}}],
           "edges": []}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), (200, 30, 30)).save(buf, format="PNG")
    return buf.getvalue()


async def test_an_output_the_broker_refuses_becomes_an_error_result_and_the_worker_goes_on(kafka, unique, tmp_path):
    path = resize_pipeline(unique, tmp_path)
    pipe = load_pipeline(path)
    await admin.ensure_topics(kafka, topics.all_topics(pipe))
    workers = Workers(path, kafka.bootstrap)
    try:
        (worker,) = workers.start("resize")
        # routing by weight to both variants, so each request's variant is fixed by its id
        from slipstream.streams.control_io import KafkaPublisher
        from slipstream.tuner.service import stage_config_record

        rec = stage_config_record(pipe, None, "resize", 1, 1, "test: route to both", {"small": 0.5, "big": 0.5})
        pub = KafkaPublisher(kafka, pipe.name)
        await pub.start()
        await pub.publish(topics.control(pipe.name), "StageConfig", rec, "resize")
        await pub.stop()
        async with PipelineClient(pipe, kafka) as client:
            # requests before the config takes effect all go small: send rounds of 20 until a big one
            # is refused (each round's results are the event to wait on; bounded)
            ids, results = [], {}
            for _ in range(15):
                sent = []
                for _ in range(20):
                    req = make_request(pipe, png())
                    sent.append(req.request_id)
                    await client.send(req)
                ids += sent
                results.update({rid: await client.result(rid, 60) for rid in sent})
                if any(r.status == "error" for r in results.values()):
                    break
        await assert_exactly_once(kafka, pipe.name, ids)
        refused = [r for r in results.values() if r.status == "error"]
        done = [r for r in results.values() if r.status == "done"]
        assert refused and done, {r.status for r in results.values()}
        assert all("cannot deliver InferenceResult" in r.reason and "TooLarge" in r.reason for r in refused), \
            refused[0].reason
        assert all(not r.hops or r.hops[-1].variant == "big" for r in refused)
        assert worker.proc.poll() is None, "the worker died"
        group = topics.consumer_group(pipe.name, "resize")
        topic = topics.stage_input(pipe.name, "resize")
        for _ in range(50):  # commits are periodic (0.5 s): poll the group's offsets, bounded
            offsets = await committed_offsets(kafka, group, topic)
            if all(c == end for c, end in offsets.values()):
                break
            await asyncio.sleep(0.2)
        assert all(c == end for c, end in offsets.values()), offsets
    finally:
        workers.stop()
