"""The Confluent wire format against a real schema registry: Apicurio Registry 2.4.2 (Confluent-compatible
API), built from Maven Central by ``deploy/registry/pom.xml`` and started on loopback
(``slipstream.streams.registry_server``, as ``slipstream registry up`` does). Every record type is registered under
``<topic>-value``, written as ``00`` + schema id + body and read back; a writer of an older generation is
resolved through the registry; and a pipeline runs end to end with the format switched on."""
from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
from pathlib import Path

import fastavro
import numpy as np
import pytest

from slipstream import schemas
from slipstream.streams import admin, codec, kafka as kclient, registry_server as rs, topics
from slipstream.streams.client import PipelineClient, make_request
from slipstream.streams.schema_registry import SchemaRegistry
from slipstream.streams.spec import load_pipeline
from tests.wire_samples import SAMPLES

from .helpers import assert_exactly_once
from .workers import Workers, unique_pipeline

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "own-onnx" / "make_model.py"


@pytest.fixture(scope="module")
def registry():
    r = rs.LocalRegistry()
    started = rs.running_pid(r) is None
    try:
        rs.up(r, timeout_s=600, progress=lambda _: None)
    except rs.RegistryServerError as exc:
        pytest.fail(f"no schema registry for the Confluent wire format: {exc}")
    yield r
    codec.use_registry(None)
    if started:
        rs.down(r, progress=lambda _: None)


def header(data: bytes) -> tuple[int, int]:
    return data[0], int.from_bytes(data[1:5], "big")


@pytest.mark.parametrize("record", sorted(SAMPLES))
def test_every_record_type_is_registered_written_and_read_through_the_registry(registry, unique, record):
    client = codec.use_registry(registry.url)
    topic = f"slipstream.{unique}.{record.lower()}"
    data = codec.encode(record, SAMPLES[record], topic)
    magic, schema_id = header(data)
    assert magic == 0 and f"{topic}-value" in client.subjects()
    # the registry holds our schema exactly (another client, nothing cached): same canonical form
    fetched = SchemaRegistry(registry.url).schema(schema_id)
    assert codec.schema_fingerprint(fetched) == codec.codec(record).fp
    codec.use_registry(registry.url)  # a fresh client: the reader fetches the writer schema by id
    assert codec.decode(record, data) == SAMPLES[record]
    assert data[5:] == codec.encode(record, SAMPLES[record])[10:]  # the same body as single-object
    with pytest.raises(codec.CodecError, match="trailing bytes"):
        codec.decode(record, data + b"\x00")


def test_a_writer_of_the_previous_generation_is_resolved_through_the_registry(registry, unique):
    """A producer still on the schema before ``model_digest`` registers its own schema; our reader
    fetches it by id and fills the new field's default."""
    client = codec.use_registry(registry.url)
    old = schemas.expanded(schemas.read("history/InferenceResult.v3.avsc"))
    old.pop("x-nested")
    schema_id = client.register(f"slipstream.{unique}.results-value", json.dumps(old))
    value = {**SAMPLES["InferenceResult"],
             "hops": [{k: v for k, v in h.items() if k != "model_digest"} for h in SAMPLES["InferenceResult"]["hops"]]}
    buf = io.BytesIO()
    buf.write(b"\x00" + schema_id.to_bytes(4, "big"))
    fastavro.schemaless_writer(buf, fastavro.parse_schema(old), value)
    got = codec.decode("InferenceResult", buf.getvalue())
    assert got == {**value, "hops": [{**h, "model_digest": ""} for h in value["hops"]]}


async def raw_values(kafka, topic: str, n: int) -> list[bytes]:
    cons = kclient.consumer(kafka, topic)
    await cons.start()
    try:
        out: list[bytes] = []
        async with asyncio.timeout(30):
            while len(out) < n:
                for recs in (await cons.getmany(timeout_ms=500)).values():
                    out += [r.value for r in recs]
        return out
    finally:
        await cons.stop()


async def test_a_pipeline_runs_end_to_end_in_the_confluent_format(kafka, registry, unique, tmp_path):
    subprocess.run([sys.executable, str(EXAMPLE), str(tmp_path / "model")], check=True, timeout=120)
    path = unique_pipeline(tmp_path / "model" / "pipeline.yaml", unique, tmp_path)
    pipe = load_pipeline(path)
    await admin.ensure_topics(kafka, topics.all_topics(pipe))
    client_registry = codec.use_registry(registry.url)  # this process writes requests, reads results
    workers = Workers(path, kafka.bootstrap, env={"SLIPSTREAM_SCHEMA_REGISTRY_URL": registry.url})
    features = np.random.default_rng(3).normal(size=(20, 4)).astype(np.float32)
    try:
        await asyncio.to_thread(workers.start, "score")
        async with PipelineClient(pipe, kafka) as client:
            reqs = []
            for x in features:
                buf = io.BytesIO()
                np.save(buf, x, allow_pickle=False)
                reqs.append(make_request(pipe, buf.getvalue()))
            await asyncio.gather(*[await client.send(r, wait=False) for r in reqs])
            results = [await client.result(r.request_id, 60) for r in reqs]
    finally:
        workers.stop()
    assert all(r.status == "done" for r in results), [r.reason for r in results]
    source, sink = topics.stage_input(pipe.name, "score"), topics.results(pipe.name)
    assert {f"{source}-value", f"{sink}-value"} <= set(client_registry.subjects())
    for topic, record in ((source, "InferenceRequest"), (sink, "InferenceResult")):
        framed = await raw_values(kafka, topic, len(reqs))
        assert {header(v) for v in framed} == {(0, client_registry.register(f"{topic}-value",
                                                                            codec.schema_json(record)))}
    await assert_exactly_once(kafka, pipe.name, [r.request_id for r in reqs])
