"""Admission: the records a stage worker read, decoded and checked against the data contract
(``streams.contract``) before any of them enters a window.

Each record ends in one of three lists:

- ``items``: requests that keep the contract, for the window planner;
- ``refused``: requests that break it but can be answered (their id and pipeline are fine): each with
  its ``error`` result naming every broken field and its value, delivered and acked as a window is;
- ``dead``: records that cannot be answered (undecodable, oversize, another pipeline's, no usable
  id): to the dead-letter topic with the reason.

So a bad value never reaches the window code, where it used to raise (issue 23: a ``fragment`` of
``"abc"`` failed its window and its partition's commit point for good). Pure: no Kafka, the clock
passed in.
"""
from __future__ import annotations

from typing import Any, Iterable, NamedTuple

from agents import routing
from agents.window import Item
from streams import codec, contract
from streams.codec import CodecError
from streams.spec import Pipeline


class Admitted(NamedTuple):
    items: list  # Item
    refused: list  # (Item, routing.Out): the error result answering it
    dead: list  # (tp, record, reason)


def admit(pipe: Pipeline, fetches: Iterable[tuple[Any, list, int]], bounds: contract.Bounds,
          now_ns: int) -> Admitted:
    """Sort the records of ``fetches`` ((tp, records, received_ns) per fetch) into an :class:`Admitted`."""
    out = Admitted([], [], [])
    decode = codec.codec("InferenceRequest").decode
    for tp, records, received_ns in fetches:
        for rec in records:
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
                out.items.append(Item(rec, req, received_ns, tp, rec.offset))
            elif not contract.answerable(broken):
                out.dead.append((tp, rec, contract.describe(broken)))
            else:
                safe = contract.sanitized("InferenceRequest", req, broken)
                item = Item(rec, safe, received_ns, tp, rec.offset)
                out.refused.append((item, routing.ended(pipe, safe, "error", contract.describe(broken)[:2000],
                                                        now_ns)))
    return out
