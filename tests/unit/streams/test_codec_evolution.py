"""Schema evolution is explicit: a record is read with its writer's schema resolved to the reader's (Avro's
rules, by fastavro), or refused naming the writer's fingerprint or id; never read with a schema it was
not written with. Registry look-ups are cached, failures included, and run off the event loop (the real
registry: tests/integration/test_schema_registry.py)."""
from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import fastavro
import pytest

from slipstream import schemas
from slipstream.streams import codec
from slipstream.streams.codec import CodecError, RecordCodec, schema_fingerprint
from slipstream.streams.schema_registry import RegistryError, SchemaRegistry

REQ = {"request_id": "r-1", "pipeline": "p", "created_ns": 11, "deadline_ns": 22, "accuracy_floor": 0.5,
       "content_type": "text/plain", "payload": b"hello", "hops": [], "fragment": "1/3", "path": ["a:0/3"],
       "accuracy": 0.75}


def reader() -> RecordCodec:
    return RecordCodec("InferenceRequest", schemas.load("InferenceRequest"))


def evolved(change) -> dict:
    """The InferenceRequest schema with its fields changed by ``change`` (a function of the list)."""
    doc = schemas.raw("InferenceRequest")
    return schemas.parse({**doc, "fields": change([dict(f) for f in doc["fields"]])})


ADDED_LATER = lambda fs: [f for f in fs if f["name"] not in ("path", "accuracy")]  # noqa: E731 - writer predates them
REMOVED_SINCE = lambda fs: fs + [{"name": "priority", "type": "int", "default": 0}]  # noqa: E731 - reader dropped it
REORDERED = lambda fs: list(reversed(fs))  # noqa: E731


@pytest.mark.parametrize("change, expect", [
    (ADDED_LATER, {**REQ, "path": [], "accuracy": 1.0}),  # the reader's defaults
    (REMOVED_SINCE, REQ),  # the writer's extra field skipped
    (REORDERED, REQ),  # matched by name
], ids=["added", "removed", "reordered"])
def test_a_record_of_a_known_evolved_writer_decodes_to_the_right_values(change, expect):
    writer = evolved(change)
    value = {k: v for k, v in REQ.items() if k in {f["name"] for f in writer["fields"]}} | (
        {"priority": 7} if change is REMOVED_SINCE else {})
    data = RecordCodec("InferenceRequest", writer).encode(value)
    r = reader()
    r.add_writer(writer)  # as schemas/history gives it
    assert r.decode(data) == expect


@pytest.mark.parametrize("change", [ADDED_LATER, REMOVED_SINCE, REORDERED], ids=["added", "removed", "reordered"])
def test_a_record_of_an_unknown_writer_is_refused_naming_its_fingerprint(change):
    writer = evolved(change)
    value = {k: v for k, v in REQ.items() if k in {f["name"] for f in writer["fields"]}} | (
        {"priority": 7} if change is REMOVED_SINCE else {})
    data = RecordCodec("InferenceRequest", writer).encode(value)
    with pytest.raises(CodecError, match=f"unknown writer schema, fingerprint {schema_fingerprint(writer).hex()}"):
        reader().decode(data)


def test_trailing_bytes_are_refused_whoever_wrote_the_record():
    writer = evolved(REORDERED)
    r = reader()
    r.add_writer(writer)
    with pytest.raises(CodecError, match="1 trailing bytes"):
        r.decode(RecordCodec("InferenceRequest", writer).encode(REQ) + b"\x00")


def test_a_writer_that_does_not_resolve_is_refused_naming_why():
    retyped = evolved(lambda fs: [{**f, "type": "int"} if f["name"] == "request_id" else f for f in fs])
    r = reader()
    r.add_writer(retyped)
    with pytest.raises(CodecError, match="does not resolve to this reader's"):
        r.decode(RecordCodec("InferenceRequest", retyped).encode({**REQ, "request_id": 5}))


def test_every_history_generation_is_a_known_writer():
    for name in schemas.NAMES:
        c = codec.codec(name)
        for old in schemas.history(name):
            assert schema_fingerprint(old) in c.known_writers


class _Registry(BaseHTTPRequestHandler):
    """A schema registry that knows id 1 (InferenceRequest) and fails every other id; counts calls."""

    calls: dict[str, int] = {}
    delay_s = 0.0

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        type(self).calls[self.path] = type(self).calls.get(self.path, 0) + 1
        time.sleep(type(self).delay_s)
        if self.path == "/schemas/ids/1":
            body, status = json.dumps({"schema": codec.schema_json("InferenceRequest")}).encode(), 200
        else:
            body, status = b'{"error_code": 40403, "message": "Schema not found"}', 404
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def registry_url():
    _Registry.calls, _Registry.delay_s = {}, 0.0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    codec.use_registry(None)


def confluent(schema_id: int) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + codec.encode("InferenceRequest", REQ)[10:]


def test_a_registry_failure_is_cached_so_the_registry_is_asked_once(registry_url):
    codec.use_registry(registry_url)
    for _ in range(3):
        with pytest.raises(CodecError, match=r"writer schema id 9: .*HTTP 404"):
            codec.decode("InferenceRequest", confluent(9))
    assert _Registry.calls == {"/schemas/ids/9": 1}
    assert codec.decode("InferenceRequest", confluent(1)) == REQ
    assert codec.decode("InferenceRequest", confluent(1)) == REQ
    assert _Registry.calls == {"/schemas/ids/9": 1, "/schemas/ids/1": 1}


def test_a_cached_failure_expires_after_its_ttl(registry_url):
    now = [0.0]
    client = SchemaRegistry(registry_url, negative_ttl_s=30.0, clock=lambda: now[0])
    for _ in range(2):
        with pytest.raises(RegistryError):
            client.schema(9)
    assert client.cached(9) and _Registry.calls == {"/schemas/ids/9": 1}
    now[0] = 31.0
    assert not client.cached(9)
    with pytest.raises(RegistryError):
        client.schema(9)
    assert _Registry.calls == {"/schemas/ids/9": 2}


def test_prefetch_looks_up_off_the_event_loop_once_per_id(registry_url):
    codec.use_registry(registry_url)
    _Registry.delay_s = 0.5

    async def main() -> int:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.create_task(tick())
        await codec.prefetch([confluent(1), confluent(1), confluent(9), None, b"\xc3\x01"])
        ticker.cancel()
        return ticks

    ticks = asyncio.run(main())
    assert ticks >= 10, f"the event loop was blocked during the look-ups ({ticks} ticks in 0.5 s)"
    assert _Registry.calls == {"/schemas/ids/1": 1, "/schemas/ids/9": 1}
    assert codec.decode("InferenceRequest", confluent(1)) == REQ  # no further call: prefetched
    with pytest.raises(CodecError, match="HTTP 404"):
        codec.decode("InferenceRequest", confluent(9))
    assert _Registry.calls == {"/schemas/ids/1": 1, "/schemas/ids/9": 1}


def test_writer_value_matches_what_fastavro_writes():  # the framing the tests above build by hand
    data = codec.encode("InferenceRequest", REQ)
    assert fastavro.schemaless_reader(__import__("io").BytesIO(data[10:]), schemas.load("InferenceRequest")) == REQ
