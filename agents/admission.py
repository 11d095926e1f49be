"""Admission: the records a stage worker read, decoded and checked against the data contract
(``slipstream.streams.contract``) before any of them enters a window.

Each record ends in one of three lists:

- ``items``: requests that keep the contract, for the window planner;
- ``refused``: requests that break it but can be answered (their id and pipeline are fine): each with
  its ``error`` result naming every broken field and its value, delivered and acked as a window is;
- ``dead``: records that cannot be answered (undecodable, oversize, another pipeline's, no usable
  id): to the dead-letter topic with the reason;
- ``dropped``: requests that ``judge`` (``slipstream.streams.shedding``: expired, or shed at the source stage)
  refuses by their deadline, each with its reason, answered ``dropped``. A record whose expiry header
  (``slipstream.streams.expiry``) and key (its request id) say enough is judged before it is decoded, and a
  refused one is never decoded: its answer is built from the key and the header.

So a bad value never reaches the window code, where it would fail its whole window (a ``fragment``
of ``"abc"`` raises there) and hold its partition's commit point for good. Pure: no Kafka, the clock
passed in.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, NamedTuple

from ..schemas.records import InferenceRequest
from ..streams import codec, contract, expiry
from ..streams.codec import CodecError
from ..streams.spec import Pipeline
from . import routing
from .window import Item


class Admitted(NamedTuple):
    items: list  # Item
    refused: list  # (Item, routing.Out): the error result answering it
    dead: list  # (tp, record, reason)
    dropped: list  # (Item, reason): refused by its deadline (``judge``)


Judge = Callable[[int], "str | None"]  # a request's deadline -> its drop reason, or None to admit it


def request_key(key: bytes | None) -> str | None:
    """A record key that can stand for the request id in an answer (every producer keys by it)."""
    if not key or len(key) > contract.MAX_ID_CHARS:
        return None
    try:
        return key.decode()
    except UnicodeDecodeError:
        return None


def admit(pipe: Pipeline, fetches: Iterable[tuple[Any, list, int]], bounds: contract.Bounds,
          now_ns: int, judge: Judge | None = None) -> Admitted:
    """Sort the records of ``fetches`` ((tp, records, received_ns) per fetch) into an :class:`Admitted`;
    ``judge`` sees each request's deadline once, before decoding when the headers carry it."""
    out = Admitted([], [], [], [])
    decode = codec.codec("InferenceRequest").decode
    for tp, records, received_ns in fetches:
        for rec in records:
            judged = judge is None
            if not judged and (e := expiry.read(rec.headers)) is not None and \
                    (rid := request_key(rec.key)) is not None:
                judged = True
                if (why := judge(e.deadline_ns)) is not None:  # undecoded: what its header and key say
                    head = InferenceRequest(request_id=rid, pipeline=pipe.name, created_ns=e.created_ns,
                                            deadline_ns=e.deadline_ns, content_type="", payload=b"")
                    out.dropped.append((Item(rec, head, received_ns, tp, rec.offset), why))
                    continue
            data = rec.value
            try:
                if data is not None and len(data) > bounds.max_payload_bytes:
                    raise CodecError(f"oversize record: {len(data)} bytes > {bounds.max_payload_bytes}")
                req = decode(data)
            except CodecError as exc:
                out.dead.append((tp, rec, str(exc)))
                continue
            broken = contract.check("InferenceRequest", req, bounds, now_ns)
            if not broken:
                item = Item(rec, InferenceRequest.from_dict(req), received_ns, tp, rec.offset)
                if not judged and (why := judge(item.req.deadline_ns)) is not None:
                    out.dropped.append((item, why))
                else:
                    out.items.append(item)
            elif not contract.answerable(broken):
                out.dead.append((tp, rec, contract.describe(broken)))
            else:
                safe = InferenceRequest.from_dict(contract.sanitized("InferenceRequest", req, broken))
                item = Item(rec, safe, received_ns, tp, rec.offset)
                out.refused.append((item, routing.ended(pipe, safe, "error", contract.describe(broken)[:2000],
                                                        now_ns)))
    return out
