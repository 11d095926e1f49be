"""The data contract as docs/guarantees.md states it, written again for the tests' oracle.

The fuzz suite must not ask the code under test what to expect, so this is a second statement of the
rules, from the documented table rather than from ``slipstream.streams.contract``, and written another
way: plain predicates per field, numbers as the table gives them, fractions parsed by hand.
``tests/unit/streams/test_contract_oracle.py`` compares the two on drawn records: a disagreement is a
bug in one of them, or a rule the docs do not state.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

# the table's numbers (docs/guarantees.md, "The data contract")
ID_CHARS = NAME_CHARS = 256
REASON_CHARS = 16_384
SKEW_NS = 60 * 10**9
SLO_FACTOR = 10
FRACTION_DIGITS = 18
MAX_PARTS = MAX_BATCH = 10**6
HOP_TIMES = ("enqueued_ns", "started_ns", "finished_ns", "received_ns")
HOP_NAMES = ("stage", "variant", "worker", "model_digest")


@dataclass(frozen=True)
class Reader:
    """The worker that reads the record: its pipeline, where it reads, and its clock."""

    pipeline: str
    slo_ms: float
    stages: int
    payload_limit: int
    at_input: bool
    now_ns: int


Rule = Callable[[Any, dict, Reader], bool]  # True: the value keeps the contract


def text(most: int, blank_ok: bool = True) -> Rule:
    return lambda v, rec, r: len(v) <= most and (blank_ok or v.strip() != "")


def clock(v: int, rec: dict, r: Reader) -> bool:
    return 0 <= v <= r.now_ns + SKEW_NS


def deadline(v: int, rec: dict, r: Reader) -> bool:
    after = v - rec["created_ns"]  # an int: a time near 2**60 ns has no exact float
    return 0 < after <= SLO_FACTOR * r.slo_ms * 10**6


def digits(s: str) -> bool:
    return 1 <= len(s) <= FRACTION_DIGITS and s.isascii() and s.isdigit() and s[0] != "0"


def fraction(v: str, rec: dict, r: Reader) -> bool:
    num, _, den = v.partition("/")
    if not digits(num) or ("/" in v and not digits(den)):
        return False
    a, b = int(num), int(den or "1")
    return a <= b and (not r.at_input or a == b)


def in_unit(v: float | None) -> bool:
    return v is None or (math.isfinite(v) and 0.0 <= v <= 1.0)


def entries(v: list, r: Reader) -> bool:
    return len(v) <= r.stages + 1 and not (r.at_input and v)


def path(v: list, rec: dict, r: Reader) -> bool:
    return entries(v, r) and all(0 < len(p) <= NAME_CHARS for p in v)


def hops(v: list, rec: dict, r: Reader) -> bool:
    return entries(v, r) and all(
        all(len(h[n]) <= NAME_CHARS for n in HOP_NAMES) and 0 <= h["batch_size"] <= MAX_BATCH
        and all(clock(h[t], rec, r) for t in HOP_TIMES) for h in v)


COMMON: dict[str, Rule] = {
    "request_id": text(ID_CHARS, blank_ok=False),
    "pipeline": lambda v, rec, r: v == r.pipeline,
    "created_ns": clock,
    "deadline_ns": deadline,
    "content_type": text(NAME_CHARS),
    "hops": hops,
    "fragment": fraction,
    "path": path,
}
REQUEST: dict[str, Rule] = {
    **COMMON,
    "accuracy_floor": lambda v, rec, r: in_unit(v),
    "accuracy": lambda v, rec, r: in_unit(v) and (not r.at_input or v == 1.0),
    "payload": lambda v, rec, r: len(v) <= r.payload_limit,
}
FRAGMENT: dict[str, Rule] = {
    **COMMON,
    "reason": text(REASON_CHARS),
    "finished_ns": clock,
    "accuracy": lambda v, rec, r: in_unit(v),
    "output": lambda v, rec, r: len(v) <= r.payload_limit,
    "parts": lambda v, rec, r: 1 <= v <= MAX_PARTS,
}
RULES = {"InferenceRequest": REQUEST, "InferenceResult": FRAGMENT}
IDENTITY = {"request_id", "pipeline"}  # without these a record cannot be answered


def broken(record: str, rec: dict, reader: Reader) -> set[str]:
    """The fields of ``rec`` (a decoded ``record``) that break the contract for ``reader``."""
    return {name for name, keeps in RULES[record].items() if not keeps(rec[name], rec, reader)}


def outcome(record: str, rec: dict, reader: Reader) -> str:
    """What the pipeline must make of the record: ``answer``, ``error`` (an input request with a usable
    id and pipeline) or ``dead`` (dead-lettered)."""
    bad = broken(record, rec, reader)
    if not bad:
        return "answer"
    return "error" if record == "InferenceRequest" and not bad & IDENTITY else "dead"


# ------------------------------------------------------------------ the control topic's StageConfig
# docs/guarantees.md, "The control topic": the rules a StageConfig must keep to be applied

def finite(v: Any, lo: float, hi: float = math.inf) -> bool:
    return type(v) in (int, float) and math.isfinite(v) and lo <= v <= hi


def integer(v: Any, lo: int, hi: int) -> bool:
    return type(v) is int and lo <= v <= hi


def stage_config_applies(key: bytes | None, rec: dict, pipeline: str, spec: Any) -> bool:
    """Whether a worker of ``pipeline`` (``spec``: its Pipeline) applies the decoded ``rec`` under ``key``."""
    try:
        text_key = key.decode("utf-8") if key is not None else None
    except UnicodeDecodeError:
        return False
    stages = {s.name: {v.name for v in s.variants} for s in spec.stages}
    routing, digests = rec.get("routing") or {}, rec.get("digests") or {}
    known = stages.get(rec["stage"], set())
    return (text_key == rec["stage"] and rec["pipeline"] == pipeline and rec["stage"] in stages
            and integer(rec["epoch"], 0, 2**53) and integer(rec["max_batch"], 1, 4096)
            and finite(rec["batch_timeout_ms"], 0, 60_000)
            and integer(rec["replicas"], 1, 1024) and integer(rec["partitions"], 1, 4096)
            and finite(rec.get("cost_per_hour", 0.0), 0)
            and (rec.get("predicted_p99_ms") is None or finite(rec["predicted_p99_ms"], 0))
            and all(finite(s, 0) for s in routing.values()) and (not routing or sum(routing.values()) > 0)
            and {rec["variant"], *routing, *digests} <= known and rec["hardware"] in spec.hardware)
