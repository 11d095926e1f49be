"""What a slow or greedy client can hold of the gateway (the real REST app, in process, no Kafka): a
body not read whole in time is answered 408 and frees its call; calls and declared body bytes in
flight are bounded (503 with ``Retry-After`` beyond); a declared body over the limit is a 413 before a
byte of it is read."""
from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp.test_utils import TestServer

from slipstream.gateway.core import Gateway, GatewayConfig
from slipstream.gateway.server import RestApi
from slipstream.streams.config import KafkaSettings

from .test_hostile_requests import PIPE, Answers

INFER = f"/v2/models/{PIPE.name}/infer"


@pytest.fixture
async def server():
    cfg = GatewayConfig(body_timeout_s=0.3, max_in_flight=2, max_body_bytes=1000, max_bytes_in_flight=1500)
    gw = Gateway(PIPE, KafkaSettings.from_env({}), cfg)
    gw.client, gw.not_ready = Answers(), lambda: None
    api = RestApi(gw)
    async with TestServer(api.app()) as srv:
        srv.api = api
        yield srv


async def partial(srv, length: int, sent: bytes = b"{"):
    """A connection that declares ``length`` body bytes and sends only ``sent``: (reader, writer)."""
    reader, writer = await asyncio.open_connection(srv.host, srv.port)
    writer.write(f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {length}\r\n\r\n".encode() + sent)
    await writer.drain()
    return reader, writer


async def holding(srv, calls: int) -> None:
    """Until the server's handlers hold ``calls`` (bounded)."""
    async with asyncio.timeout(5):
        while srv.api.in_flight.calls != calls:
            await asyncio.sleep(0.01)


async def status_and_body(reader) -> tuple[int, dict]:
    async with asyncio.timeout(5):  # a server that never answers fails the test, not hangs it
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
        return int(head.split()[1]), json.loads(await reader.readexactly(length))


async def post(srv, body: bytes) -> tuple[int, dict, dict]:
    reader, writer = await partial(srv, len(body), body)
    try:
        code, doc = await status_and_body(reader)
    finally:
        writer.close()
    return code, doc, {}


async def test_a_body_that_never_comes_is_answered_408_and_frees_its_call(server):
    reader, writer = await partial(server, 500)
    code, doc = await status_and_body(reader)
    writer.close()
    assert code == 408 and "not read whole within 0.3 s" in doc["error"]
    valid = json.dumps({"inputs": [{"name": "input", "shape": [1], "datatype": "BYTES", "data": ["hi"]}]}).encode()
    assert (await post(server, valid))[0] == 200


async def test_calls_and_body_bytes_in_flight_are_bounded(server):
    held = [await partial(server, 400), await partial(server, 400)]  # two calls held by slow bodies
    await holding(server, 2)
    code, doc, _ = await post(server, b"{}")
    assert code == 503 and "calls in flight" in doc["error"]
    for reader, writer in held:
        assert (await status_and_body(reader))[0] == 408
        writer.close()
    held = [await partial(server, 900)]
    await holding(server, 1)
    code, doc, _ = await post(server, b"{" + b" " * 700 + b"}")
    assert code == 503 and "body bytes in flight" in doc["error"]
    held[0][1].close()


async def test_a_declared_body_over_the_limit_is_refused_before_it_is_read(server):
    reader, writer = await partial(server, 5000, b"")
    code, doc = await status_and_body(reader)
    writer.close()
    assert code == 413 and "5000 bytes over 1000" in doc["error"]
