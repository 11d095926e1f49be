"""No decode path makes a blocking schema-registry call on the event loop (issue 23, part 3).

The registry here is a socket that accepts connections and never answers: a call to it would block
for the client's whole timeout. On an event loop, a record naming a schema id that was not prefetched
is refused at once with the reason (its dead letter), and the socket never sees a connection (an
event set by its accepting thread, checked after the decode). Off the loop, :func:`codec.prefetch`
makes the one bounded look-up in a thread, and its failure is cached."""
from __future__ import annotations

import socket
import threading
from collections import namedtuple
from pathlib import Path

import pytest

from slipstream.agents.admission import admit
from slipstream.streams import codec, contract
from slipstream.streams.codec import CodecError
from slipstream.streams.spec import load_pipeline

FANOUT3 = Path(__file__).parents[2] / "integration" / "pipelines" / "fanout3.yaml"
Rec = namedtuple("Rec", "value offset key")


class SilentRegistry:
    """A TCP socket that accepts and never answers; ``connected`` is set at the first connection."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.connected, self.conns = threading.Event(), []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            self.connected.set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.fixture
def silent():
    s = SilentRegistry()
    registry = codec.use_registry(s.url)
    registry.timeout_s = 0.5  # the bounded look-up of the prefetch test
    yield s
    codec.use_registry(None)
    s.close()


def request(pipe, rid: str) -> dict:
    return {"request_id": rid, "pipeline": pipe.name, "created_ns": 1, "deadline_ns": 2, "accuracy_floor": None,
            "content_type": "text/plain", "payload": b"x", "hops": [], "fragment": "1", "path": [],
            "accuracy": 1.0}


def confluent(pipe, schema_id: int) -> bytes:
    return codec.codec("InferenceRequest").encode_confluent(request(pipe, "r-1"), schema_id)


async def test_decoding_on_the_event_loop_refuses_an_unfetched_schema_id_without_calling_the_registry(silent):
    pipe = load_pipeline(FANOUT3)
    with pytest.raises(CodecError, match="schema id 4242 not looked up"):
        codec.decode("InferenceRequest", confluent(pipe, 4242))
    bounds = contract.Bounds.of(pipe, pipe.source, 1 << 20)
    out = admit(pipe, [(("in", 0), [Rec(confluent(pipe, 4243), 7, None)], 0)], bounds, 10)  # the stage worker's path
    assert not out.items and not out.refused
    assert len(out.dead) == 1 and "schema id 4243 not looked up" in out.dead[0][2]
    assert not silent.connected.is_set()  # the registry was never called


async def test_prefetch_makes_one_bounded_look_up_off_the_loop_and_caches_its_failure(silent):
    pipe = load_pipeline(FANOUT3)
    data = confluent(pipe, 4244)
    await codec.prefetch([data])  # the silent registry: the thread's call ends at the client's timeout
    assert silent.connected.is_set()
    with pytest.raises(CodecError, match="writer schema id 4244: schema registry GET"):
        await codec.decode_fetched("InferenceRequest", data)  # the cached failure, no second call
    assert len(silent.conns) == 1


async def test_encoding_on_the_event_loop_never_registers_inline_and_preregister_runs_in_a_thread(silent):
    pipe = load_pipeline(FANOUT3)
    value = request(pipe, "r-2")
    with pytest.raises(CodecError, match="not registered yet"):
        codec.encode("InferenceRequest", value, "t-in")
    assert not silent.connected.is_set()  # the registry was never called on the loop
    await codec.preregister([("InferenceRequest", "t-in")])  # the silent registry: ends at the timeout
    assert silent.connected.is_set()
    with pytest.raises(CodecError, match="not registered yet"):  # still refused, never blocking
        codec.encode("InferenceRequest", value, "t-in")
