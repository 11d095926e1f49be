"""A request's deadline in a Kafka record header, so a worker can tell an expired request from the
record's headers alone and answer it without decoding the record (issue 40: past capacity, a FIFO
backlog of stale requests must cost little to drop, or dropping it is all a worker does).

Every ``InferenceRequest`` that carries a whole request (``fragment`` "1", no fan-out ``path``) is
written with the header ``slipstream-expiry``: 16 bytes, the request's ``created_ns`` and
``deadline_ns`` as big-endian signed 64-bit integers (``slipstream.streams.kafka.headers_for`` adds it, so
every producer of the project writes it). Its record key is the request id (every producer keys by
it). A stage worker that reads such a record past the point where it could still be served answers
it ``dropped`` from the key and this header (``slipstream.agents.admission``); everything else is decoded and
checked as before. Records without the header (other producers, fan-out fragments, older writers)
take the decoding path; a header that does not hold two times in order is ignored the same way.

The header is the client's word as much as the record's body: a client that writes a deadline in
the past has its own request dropped, nothing more. Pure: no Kafka, no clock.
"""
from __future__ import annotations

import struct
from typing import Any, Mapping, NamedTuple, Sequence

from ..schemas.records import InferenceRequest

HEADER = "slipstream-expiry"
_PACK = struct.Struct(">qq")


class Expiry(NamedTuple):
    created_ns: int
    deadline_ns: int


def header(request: InferenceRequest | Mapping[str, Any]) -> tuple[str, bytes] | None:
    """The expiry header of an ``InferenceRequest`` (or a mapping the codec encodes as one), or None
    when it is a fan-out fragment (its drop must reach the join with its fragment and path, which
    only the body has)."""
    if isinstance(request, Mapping):
        r = request
        fragment, path, created, deadline = r.get("fragment", "1"), r.get("path"), r["created_ns"], r["deadline_ns"]
    else:
        fragment, path, created, deadline = request.fragment, request.path, request.created_ns, request.deadline_ns
    if fragment != "1" or path:
        return None
    return HEADER, _PACK.pack(created, deadline)


def read(headers: Sequence[tuple[str, bytes]] | None) -> Expiry | None:
    """The expiry a record's headers carry (the first ``slipstream-expiry``), or None when there is
    none or it is not 16 bytes of two times, creation first."""
    for name, value in headers or ():
        if name == HEADER:
            if value is None or len(value) != _PACK.size:
                return None
            e = Expiry(*_PACK.unpack(value))
            return e if 0 <= e.created_ns <= e.deadline_ns else None
    return None
