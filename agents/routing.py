"""Routing: where a stage's outputs go, as pure functions from (pipeline, request, outputs) to records.

- A chain forwards each item to its child's input topic.
- Fan-out (an item emits k outputs, or one output goes to several children) splits the request's
  *fragment* (the share of the request a record carries, a fraction): each of the n records gets 1/n of
  it and an index in ``path``. k = 0 (nothing detected) ends that fragment as done with no output.
- A conditional branch (``Emit.to``) sends the item to the one child named.
- At a sink, or when a fragment ends early (dropped, error, k = 0), the fragment becomes an
  ``InferenceResult``: on the results topic when it is the whole request (fragment 1), else on the
  join topic, where ``slipstream.agents.join`` sums fragments back to 1.

Every record carries the hops so far plus this stage's own ``HopTiming``. The request comes in typed
(``slipstream.schemas.records.InferenceRequest``, as ``slipstream.agents.admission`` decodes it) and
the records go out typed (``InferenceResult``, ``InferenceRequest``, ``DeadLetter``): the codec turns
them into the dicts it writes (``slipstream.streams.codec.encode``).
"""
from __future__ import annotations

import time
from dataclasses import replace
from fractions import Fraction
from functools import lru_cache
from typing import Any, NamedTuple

from ..schemas.records import DeadLetter, HopTiming, InferenceRequest, InferenceResult, Record
from ..streams import topics
from ..streams.executor import ItemOutput
from ..streams.limits import MAX_ERROR_CHARS, Limits
from ..streams.spec import Pipeline


class Out(NamedTuple):
    """One record to produce (a tuple: one is made per output)."""

    topic: str
    key: str
    record: str  # schema name
    value: Record  # of that schema (``slipstream.schemas.records``)


def hop(stage: str, variant: str, batch_size: int, enqueued_ns: int, started_ns: int,
        finished_ns: int, worker: str, received_ns: int, model_digest: str = "") -> HopTiming:
    return HopTiming(stage=stage, variant=variant, batch_size=batch_size, enqueued_ns=enqueued_ns,
                     started_ns=started_ns, finished_ns=finished_ns, worker=worker,
                     received_ns=received_ns, model_digest=model_digest)


@lru_cache(maxsize=4096)
def fraction(text: str) -> Fraction:
    """A record's ``fragment`` (parsed once per distinct text: most are "1")."""
    return Fraction(text)


@lru_cache(maxsize=4096)
def fraction_text(text: str, parts: int = 1) -> str:
    """A record's ``fragment`` split in ``parts``, as the records write it (once per text and parts)."""
    return str(fraction(text) / parts)


def child_stages(pipe: Pipeline, stage: str) -> list[str]:
    """The stages ``stage`` sends to (computed once per batch, not per record)."""
    return [e.dst for e in pipe.children(stage)]


def enqueued_ns(req: InferenceRequest) -> int:
    """When the request was handed to this stage: the previous hop's finish, or its creation."""
    return req.hops[-1].finished_ns if req.hops else req.created_ns


def _hops(req: InferenceRequest, own_hop: HopTiming | None) -> tuple[HopTiming, ...]:
    """The hops an output carries: the request's and this stage's (``own_hop``)."""
    return req.hops + (own_hop,) if own_hop else req.hops


def _result(pipe: Pipeline, req: InferenceRequest, hops: tuple, status: str, reason: str,
            finished_ns: int, output: bytes = b"", content_type: str = "application/octet-stream",
            accuracy: float | None = None, fragment: Fraction | None = None,
            path: tuple | None = None) -> Out:
    if fragment is None:
        whole, frag_text = fraction(req.fragment) == 1, fraction_text(req.fragment)
    else:
        whole, frag_text = fragment == 1, str(fragment)
    value = InferenceResult(
        request_id=req.request_id, pipeline=req.pipeline, status=status, reason=reason,
        created_ns=req.created_ns, deadline_ns=req.deadline_ns, finished_ns=finished_ns,
        content_type=content_type, output=output, hops=hops,
        accuracy=req.accuracy if accuracy is None else accuracy, parts=1,
        fragment=frag_text, path=req.path if path is None else path)
    topic = topics.results(pipe.name) if whole else topics.join(pipe.name)
    return Out(topic, req.request_id, "InferenceResult", value)


def ended(pipe: Pipeline, req: InferenceRequest, status: str, reason: str, now_ns: int,
          own_hop: HopTiming | None = None) -> Out:
    """A fragment that ends here without output: dropped or error."""
    return _result(pipe, req, _hops(req, own_hop), status, reason, now_ns)


def forward(pipe: Pipeline, stage: str, req: InferenceRequest, out: ItemOutput, own_hop: HopTiming,
            variant_accuracy: float, children: list[str] | None = None) -> list[Out]:
    """Records for everything one item produced at ``stage`` (``children``: its children, if known)."""
    hops = _hops(req, own_hop)
    accuracy = req.accuracy * variant_accuracy
    now = own_hop.finished_ns
    children = child_stages(pipe, stage) if children is None else children
    if not children:  # a sink: the emits are the output
        if len(out.emits) == 1:
            e = out.emits[0]
            return [_result(pipe, req, hops, "done", "", now, e.payload, e.content_type, accuracy)]
        return _split_results(pipe, req, hops, out, now, accuracy)
    targets = []  # (emit index, emit, child)
    for i, e in enumerate(out.emits):
        if e.to is not None:
            if e.to not in children:
                raise ValueError(f"stage {stage!r} routed to {e.to!r}, which is not one of its "
                                 f"children {children}")
            targets.append((i, e, e.to))
        else:
            targets.extend((i, e, c) for c in children)
    if not targets:  # fan-out of zero: this fragment is complete, with nothing to show
        return [_result(pipe, req, hops, "done", "no outputs", now, b"", "application/json",
                        accuracy)]
    n = len(targets)
    share = fraction_text(req.fragment, n)
    records = []
    for j, (i, e, child) in enumerate(targets):  # the request's other fields kept as they are
        path = req.path + ((f"{stage}:{j}/{n}",) if n > 1 else ())
        value = replace(req, hops=hops, payload=e.payload, content_type=e.content_type,
                        fragment=share, path=path, accuracy=accuracy)
        records.append(Out(topics.stage_input(pipe.name, child), req.request_id,
                           "InferenceRequest", value))
    return records


def _split_results(pipe: Pipeline, req: InferenceRequest, hops: tuple, out: ItemOutput, now: int,
                   accuracy: float) -> list[Out]:
    """A sink that emitted 0 or several outputs: one fragment result each (0 = done, empty)."""
    frag = fraction(req.fragment)
    if not out.emits:
        return [_result(pipe, req, hops, "done", "no outputs", now, b"", "application/json", accuracy)]
    n = len(out.emits)
    stage = hops[-1].stage
    return [_result(pipe, req, hops, "done", "", now, e.payload, e.content_type, accuracy,
                    fragment=frag / n, path=req.path + (f"{stage}:{j}/{n}",))
            for j, e in enumerate(out.emits)]


def dead_letter(pipe: Pipeline, stage: str, data: bytes | None, topic: str, partition: int, offset: int,
                error: str, now_ns: int, limits: Limits | None = None) -> Out:
    """A record a stage could not use, kept byte-for-byte with where it came from and why (cut to
    ``MAX_ERROR_CHARS``); with ``limits`` (``slipstream.streams.limits``) its bytes are cut to fit the dead-letter
    topic when they do not, and the whole input's size and sha256 go into the reason."""
    error = error[:MAX_ERROR_CHARS]
    out = Out(topics.dead_letters(pipe.name), f"{topic}:{partition}:{offset}", "DeadLetter", DeadLetter(
        original=data or b"", topic=topic, partition=partition, offset=offset, error=error, stage=stage,
        at_ns=now_ns))
    if limits is None or not data:
        return out
    rest = len(error.encode()) + len(out.key) + len(topic) + len(stage) + 512  # the rest, generously
    kept, note = limits.fit_original(out.topic, data, rest)
    if not note:
        return out
    return dead_letter(pipe, stage, kept, topic, partition, offset, error[:MAX_ERROR_CHARS - len(note)] + note, now_ns)


def replacement(pipe: Pipeline, stage: str, limits: Limits | None, out: Out, item: Any,
                exc: BaseException) -> Out | None:
    """What goes in place of ``out`` (answering ``item``, a queued input: ``.req``, ``.record``; None:
    nothing to answer), which cannot be written: an error result for its request, then a dead letter
    of the input, then nothing."""
    reason = f"{stage}: cannot deliver {out.record} to {out.topic}: {type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
    if item is None or out.record == "DeadLetter":
        return None
    if out.record != "InferenceResult" or out.value.status != "error":
        return ended(pipe, item.req, "error", reason, time.time_ns())
    m = item.record
    return dead_letter(pipe, stage, m.value, m.topic, m.partition, m.offset, reason, time.time_ns(), limits)
