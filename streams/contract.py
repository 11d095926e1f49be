"""The data contract: one rule set for every field of the records that enter a pipeline's data plane,
checked where a record enters (a stage worker's intake, the join's), right after it decodes.

Avro says a field is a string or a long; the contract says which strings and longs a pipeline can
serve. A record that breaks it is answered at the door, never taken into a window:

- an ``InferenceRequest`` with a usable id (``request_id`` within bounds, ``pipeline`` this one) ends as
  an ``error`` result naming each broken field and its value (:func:`describe`), built from
  :func:`sanitized` (the request with each broken field at its schema default, so the result builder
  cannot trip over it); one without a usable id cannot be answered and goes to the dead-letter topic;
- a join fragment (``InferenceResult`` on the join topic) that breaks it goes to the dead-letter topic
  (the rest of its request may still come, or the join times it out).

Rules, per field (``RULES``; a record type's rules are those of its fields): ids non-empty and
bounded; ``pipeline`` this pipeline's; times not negative and not more than ``MAX_CLOCK_SKEW_NS``
ahead of the receiving worker's clock; a deadline after the request's creation and at most
``MAX_SLO_FACTOR`` times the pipeline's SLO after it (so the join holds an open request for a bounded
time); ``fragment`` a fraction ``a/b`` written as the stages write it, with ``0 < a <= b``;
accuracies finite in [0, 1]; strings, lists and payloads bounded. At the source stage the fields the
stages fill (``hops``, ``fragment``, ``path``, ``accuracy``) must be at their defaults: a client sets
only the first seven (schemas/InferenceRequest.avsc).

Pure functions of (record, :class:`Bounds`, ``now_ns``); no Kafka.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from functools import cache, lru_cache
from typing import Any, Callable, Mapping, NamedTuple

from .. import schemas

MAX_ID_CHARS = 256
MAX_NAME_CHARS = 256  # content types, stage/variant/worker names in hops, path entries
MAX_REASON_CHARS = 16_384
MAX_CLOCK_SKEW_NS = 60 * 10**9
MAX_SLO_FACTOR = 10  # a request may ask for a deadline up to this many pipeline SLOs after its creation
MAX_FRACTION_DIGITS = 18  # numerator and denominator of a fragment (fan-outs multiply denominators)
MAX_PARTS = 1_000_000
MAX_BATCH = 1_000_000
NS_PER_MS = 1_000_000


def deadline_ns(created_ns, slo_ms: float):
    """A request's deadline: its creation plus the SLO, in ns (``created_ns`` an int or an int array)."""
    return created_ns + int(slo_ms * NS_PER_MS)


_FRACTION = re.compile(r"[1-9][0-9]{0,%d}(/[1-9][0-9]{0,%d})?" % (MAX_FRACTION_DIGITS - 1, MAX_FRACTION_DIGITS - 1))


@dataclass(frozen=True)
class Bounds:
    """What the rules depend on besides the record: the pipeline and where the record enters."""

    pipeline: str
    slo_ms: float
    stages: int  # stages in the pipeline: a record has passed at most this many (plus the join)
    max_payload_bytes: int
    source: bool = False  # the pipeline's input topic: only the client's fields may be set

    @classmethod
    def of(cls, pipe: Any, stage: str, max_payload_bytes: int) -> "Bounds":
        """The bounds of ``stage`` of ``pipe`` (a ``slipstream.streams.spec.Pipeline``; ``join`` for the join)."""
        return cls(pipe.name, pipe.slo_ms, len(pipe.stages), max_payload_bytes, stage == pipe.source)


class Violation(NamedTuple):
    field: str
    value: Any
    rule: str

    def __str__(self) -> str:
        return f"{self.field}={show(self.value)}: {self.rule}"


def show(value: Any, limit: int = 80) -> str:
    """A value as a reason quotes it: bounded (bytes and lists by their size)."""
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    if isinstance(value, list):
        return f"<list of {len(value)}>"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}...({len(text)} chars)"


# ------------------------------------------------------------------------------------------ rules
# A rule is (field, check); a check returns None when the value is fine, else what is wrong.

Check = Callable[[Any, Bounds, int, Mapping[str, Any]], "str | None"]


def _text(max_chars: int, empty: bool = True) -> Check:
    def check(v, b, now, rec):
        if not empty and not v.strip():
            return "must not be empty"
        if len(v) > max_chars:
            return f"longer than {max_chars} characters"
        return None
    return check


def _pipeline(v, b, now, rec):
    return None if v == b.pipeline else f"not this pipeline's ({b.pipeline!r})"


def _time(v, b, now, rec):
    if v < 0:
        return "negative"
    if v > now + MAX_CLOCK_SKEW_NS:
        return f"more than {MAX_CLOCK_SKEW_NS // 10**9} s ahead of this worker's clock ({now})"
    return None


def _deadline(v, b, now, rec):
    created = rec["created_ns"]
    if v <= created:
        return f"not after created_ns ({created})"
    most = int(MAX_SLO_FACTOR * b.slo_ms * 1e6)
    if v - created > most:
        return f"more than {MAX_SLO_FACTOR} x the pipeline's SLO ({b.slo_ms:g} ms) after created_ns"
    return None


def _unit(v, b, now, rec):
    return None if v is None or (math.isfinite(v) and 0.0 <= v <= 1.0) else "not a number in [0, 1]"


def _fraction(v, b, now, rec):
    if len(v) > 2 * MAX_FRACTION_DIGITS + 1:  # never a fraction; and the verdicts kept stay small
        return f"not a fraction a/b (digits, at most {MAX_FRACTION_DIGITS} each)"
    return _fraction_verdict(v, b.source)


@lru_cache(maxsize=4096)
def _fraction_verdict(v: str, source: bool) -> str | None:
    """The fragment rule, once per distinct text (nearly every record carries "1")."""
    if not _FRACTION.fullmatch(v):
        return f"not a fraction a/b (digits, at most {MAX_FRACTION_DIGITS} each)"
    f = Fraction(v)
    if f > 1:
        return "more than the whole request (1)"
    if source and f != 1:
        return "must be 1 at the pipeline's input (the stages split it)"
    return None


def _payload(v, b, now, rec):
    return None if len(v) <= b.max_payload_bytes else f"more than {b.max_payload_bytes} bytes"


def _path(v, b, now, rec):
    if b.source and v:
        return "must be empty at the pipeline's input (the stages fill it)"
    if len(v) > b.stages + 1:
        return f"more than {b.stages + 1} entries"
    bad = next((p for p in v if not p or len(p) > MAX_NAME_CHARS), None)
    return None if bad is None else f"entry {show(bad)} empty or longer than {MAX_NAME_CHARS} characters"


def _hops(v, b, now, rec):
    if b.source and v:
        return "must be empty at the pipeline's input (the stages fill them)"
    if len(v) > b.stages + 1:
        return f"more than {b.stages + 1} hops"
    for i, h in enumerate(v):
        for name in ("stage", "variant", "worker", "model_digest"):
            if len(h[name]) > MAX_NAME_CHARS:
                return f"hops[{i}].{name} longer than {MAX_NAME_CHARS} characters"
        if not 0 <= h["batch_size"] <= MAX_BATCH:
            return f"hops[{i}].batch_size {h['batch_size']} not in [0, {MAX_BATCH}]"
        for name in ("enqueued_ns", "started_ns", "finished_ns", "received_ns"):
            why = _time(h[name], b, now, rec)
            if why:
                return f"hops[{i}].{name} {h[name]} {why}"
    return None


def _source_accuracy(v, b, now, rec):
    why = _unit(v, b, now, rec)
    if why is None and b.source and v != 1.0:
        return "must be 1.0 at the pipeline's input (the stages multiply it)"
    return why


def _parts(v, b, now, rec):
    return None if 1 <= v <= MAX_PARTS else f"not in [1, {MAX_PARTS}]"


RULES: dict[str, tuple[tuple[str, Check], ...]] = {
    "InferenceRequest": (
        ("request_id", _text(MAX_ID_CHARS, empty=False)), ("pipeline", _pipeline), ("created_ns", _time),
        ("deadline_ns", _deadline), ("accuracy_floor", _unit), ("content_type", _text(MAX_NAME_CHARS)),
        ("payload", _payload), ("hops", _hops), ("fragment", _fraction), ("path", _path),
        ("accuracy", _source_accuracy),
    ),
    "InferenceResult": (  # a fragment on the join topic
        ("request_id", _text(MAX_ID_CHARS, empty=False)), ("pipeline", _pipeline), ("reason", _text(MAX_REASON_CHARS)),
        ("created_ns", _time), ("deadline_ns", _deadline), ("finished_ns", _time),
        ("content_type", _text(MAX_NAME_CHARS)), ("output", _payload), ("hops", _hops), ("accuracy", _unit),
        ("parts", _parts), ("fragment", _fraction), ("path", _path),
    ),
}
# Without these a record cannot be answered: it is dead-lettered instead.
IDENTITY = frozenset({"request_id", "pipeline"})


def check(record: str, value: Mapping[str, Any], b: Bounds, now_ns: int) -> list[Violation]:
    """Every broken rule of ``value`` (a decoded ``record``), in field order; empty when it is fine."""
    out = []
    for name, rule in RULES[record]:
        why = rule(value[name], b, now_ns, value)
        if why is not None:
            out.append(Violation(name, value[name], why))
    return out


def answerable(violations: list[Violation]) -> bool:
    """Whether a record with these violations can still be answered (its id and pipeline are fine)."""
    return not any(v.field in IDENTITY for v in violations)


REASON_PREFIX = "contract: "  # an error result's reason for a request that broke the contract
BAD_INPUT_PREFIX = "bad input: "  # ... for a payload a stage's model refused (slipstream.agents.stage.serve)
_FIELD = re.compile(r"(?:^contract: |; )([A-Za-z_][\w.\[\]]*)=")


def describe(violations: list[Violation]) -> str:
    """The reason an error result or dead letter gives: every broken field with its value."""
    return REASON_PREFIX + "; ".join(map(str, violations))


def fields_in(reason: str) -> list[str]:
    """The fields a :func:`describe` reason names, in order (none for any other reason)."""
    return _FIELD.findall(reason) if reason.startswith(REASON_PREFIX) else []


@cache
def _defaults(record: str) -> dict[str, Any]:
    return {f["name"]: f["default"] for f in schemas.raw(record)["fields"] if "default" in f}


def sanitized(record: str, value: Mapping[str, Any], violations: list[Violation]) -> dict[str, Any]:
    """``value`` with each broken field at its schema default (a broken ``fragment`` takes ``path``
    along: the answer is then the whole request's), so a result can be built from it."""
    out = dict(value)
    broken = {v.field for v in violations}
    if "fragment" in broken:
        broken.add("path")
    for name in broken & set(_defaults(record)):
        out[name] = _defaults(record)[name]
    return out
