"""A request written with a schema the worker does not know (its fields reordered: read with the
worker's own schema it would be misread) is dead-lettered naming the writer's fingerprint, by a real
worker on the real broker; one written with a generation the worker knows (``schemas/history``) and a
current one are answered, each once."""
from __future__ import annotations

from slipstream import schemas
from slipstream.streams import admin, codec, kafka as kclient, topics
from slipstream.streams.client import PipelineClient, make_request
from slipstream.streams.codec import RecordCodec, schema_fingerprint
from slipstream.streams.spec import load_pipeline

from .helpers import assert_exactly_once, read_topic
from .test_control_plane import two_variant_pipeline
from .workers import Workers


async def test_an_unknown_writer_is_dead_lettered_naming_its_fingerprint(kafka, unique, tmp_path):
    path = two_variant_pipeline(unique, tmp_path)
    pipe = load_pipeline(path)
    await admin.ensure_topics(kafka, topics.all_topics(pipe))
    doc = schemas.raw("InferenceRequest")
    reordered = schemas.parse({**doc, "fields": list(reversed(doc["fields"]))})
    previous = schemas.parse(schemas.read("history/InferenceRequest.v2.avsc"))
    unknown, old, current = (make_request(pipe, b"x") for _ in range(3))
    workers = Workers(path, kafka.bootstrap)
    try:
        workers.start("s")
        async with PipelineClient(pipe, kafka) as client:
            prod = kclient.producer(kafka)
            await prod.start()
            try:
                client.expect(old.request_id)  # its result may come before we await it
                for req, data in ((unknown, RecordCodec("InferenceRequest", reordered).encode(unknown)),
                                  (old, RecordCodec("InferenceRequest", previous).encode(old))):
                    await (await prod.send(client.input_topic, data, key=req.request_id.encode()))
            finally:
                await prod.stop()
            await client.send(current)
            answered = [await client.result(r.request_id, 60) for r in (old, current)]
        assert [r.status for r in answered] == ["done", "done"]
        await assert_exactly_once(kafka, pipe.name, [old.request_id, current.request_id])
        (letter,) = await read_topic(kafka, topics.dead_letters(pipe.name), 1, record="DeadLetter")
        assert f"unknown writer schema, fingerprint {schema_fingerprint(reordered).hex()}" in letter["error"]
        assert letter["original"] == RecordCodec("InferenceRequest", reordered).encode(unknown)
        assert codec.decode_typed("InferenceRequest", codec.encode("InferenceRequest", current)) == current
    finally:
        workers.stop()
