"""Fuzz cases for the data plane, drawn with hypothesis from the Avro schemas (``schemas/*.avsc``).

A case is one record to produce on a pipeline topic, with what the pipeline must make of it:

- ``answer``: a request (or join fragment) that keeps the contract: exactly one result under its id;
- ``error``: a request that breaks the contract but can be answered: exactly one ``error`` result
  whose reason names the broken field;
- ``dead``: a record that cannot be answered (undecodable, no usable id, another pipeline's, a join
  fragment that breaks the contract): a dead letter of it, naming the problem;
- ``skipped``: a control record that breaks the control topic's rules (``slipstream.streams.control_rules``):
  skipped by every worker, which keeps serving.

Every case starts from a valid record; a mutated one has one field replaced by a value of the
field's Avro type drawn with a bias to the edges (empty and huge strings and arrays, extreme longs
and ints, NaN and infinities, non-fractions), so the record is still valid Avro and only the contract
can refuse it. Framing mutations (garbage, a null value, truncated or trailing bytes, an unknown
fingerprint) and bad keys (empty, huge, not UTF-8) come on top. Cases are drawn by hypothesis's
generator (:func:`draw`), seeded, so a run can be repeated.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from hypothesis import HealthCheck, Phase, given, seed as hseed, settings, strategies as st

from slipstream import schemas
from slipstream.streams import codec
from tests import contract_oracle as oracle

LONG = (-(2**63), 2**63 - 1)
INT = (-(2**31), 2**31 - 1)
NS = 10**9
EDGE_STRINGS = ["", " ", "abc", "1/0", "0/1", "-1/2", "1/2", "3/2", "1.5", "1e3", " 1", "\x00", "é" * 64,
                "🙂", "1/" + "9" * 30]


@dataclass(frozen=True)
class Case:
    topic: str  # "input" or "join"
    key: bytes | None
    value: bytes | None
    request_id: str | None  # the id it is answered under (None: cannot be)
    expect: str  # answer | error | dead | skipped
    field: str = ""  # the mutated field, or the framing mutation
    broken: tuple[str, ...] = ()  # the fields that break the contract (a deadline breaks with its creation)

    @property
    def mutated(self) -> bool:
        """A record changed from a valid one: a field or the framing (a control record: any one its
        rules refuse, a bad key included); the rest is the valid traffic between them."""
        return bool(self.field) or self.expect == "skipped"


def huge_text(lo: int, hi: int) -> st.SearchStrategy[str]:
    """Long strings without spending hypothesis's entropy (its buffer is a few kB)."""
    return st.tuples(st.integers(lo, hi), st.characters(codec="utf-8", exclude_categories=("Cs",))).map(
        lambda nc: nc[1] * nc[0])


def rare(strategy: st.SearchStrategy, otherwise: st.SearchStrategy, one_in: int = 20) -> st.SearchStrategy:
    """``strategy`` once in ``one_in`` draws, else ``otherwise``: huge values, rarely, so a run of
    thousands of records stays small."""
    return st.integers(1, one_in).flatmap(lambda k: strategy if k == 1 else otherwise)


def of_type(t: Any, named: dict[str, dict]) -> st.SearchStrategy:
    """A value of Avro type ``t``, biased to the edges."""
    if isinstance(t, list):  # a union
        return st.one_of(*(of_type(x, named) for x in t))
    if isinstance(t, dict) and t.get("type") == "array":
        item = of_type(t["items"], named)
        return st.one_of(st.lists(item, max_size=4), st.integers(5, 64).flatmap(
            lambda n: item.map(lambda x: [x] * n if len(repr(x)) < 600 else [x] * 2)))
    if isinstance(t, dict) and t.get("type") == "map":
        return st.dictionaries(st.one_of(st.sampled_from(EDGE_STRINGS), st.text(st.characters(codec="utf-8"), max_size=12)),
                               of_type(t["values"], named), max_size=4)
    if isinstance(t, dict) and t.get("type") == "enum":
        return st.sampled_from(t["symbols"])
    if isinstance(t, dict) and t.get("type") == "record":
        return st.fixed_dictionaries({f["name"]: of_type(f["type"], named) for f in t["fields"]})
    if isinstance(t, str) and t.split(".")[-1] in named:
        return of_type(named[t.split(".")[-1]], named)
    return {
        "null": st.none(),
        "string": st.one_of(st.sampled_from(EDGE_STRINGS), st.text(st.characters(codec="utf-8"), max_size=24), huge_text(257, 3000), rare(huge_text(17_000, 20_000), huge_text(257, 600))),
        "bytes": st.one_of(st.just(b""), st.binary(max_size=64), st.integers(1000, 4000).map(lambda n: b"\xab" * n),
                           rare(st.integers(100_000, 120_000).map(lambda n: b"\xab" * n), st.binary(max_size=8))),
        "long": st.one_of(st.sampled_from([0, -1, 1, *LONG]), st.integers(*LONG)),
        "int": st.one_of(st.sampled_from([0, -1, 1, *INT]), st.integers(*INT)),
        "double": st.one_of(st.sampled_from([0.0, -0.0, 1.0, -1.0, 1.0000001, float("nan"), float("inf"),
                                             float("-inf"), 1e308]), st.floats()),
        "boolean": st.booleans(),
    }[t]


def fields(record: str) -> dict[str, Any]:
    return {f["name"]: f["type"] for f in schemas.raw(record)["fields"]}


NAMED = {"HopTiming": schemas.raw("HopTiming")}
KEYS = st.one_of(st.none(), st.just(b""), st.just(b"\xff\xfe\xfd"), st.binary(max_size=16),
                 st.integers(300, 5000).map(lambda n: b"k" * n))
FRAMINGS = ("garbage", "null-value", "truncated", "trailing-bytes", "unknown-fingerprint")


@st.composite
def mutation(draw, record: str) -> tuple[str, Any] | tuple[str, None]:
    """(field, new value), or (framing mutation, None); ("", None) for no mutation (valid traffic)."""
    kind = draw(st.sampled_from(["valid", "field", "field", "field", "framing"]))
    if kind == "valid":
        return "", None
    if kind == "framing":
        return draw(st.sampled_from(FRAMINGS)), None
    name = draw(st.sampled_from(sorted(fields(record))))
    return name, draw(of_type(fields(record)[name], NAMED))


def draw(strategy: st.SearchStrategy, n: int, seed: int) -> list:
    """``n`` values of ``strategy`` from hypothesis's generator (no shrinking: nothing fails here)."""
    out: list = []

    @hseed(seed)
    @settings(max_examples=n, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(x):
        out.append(x)

    collect()
    return out


def draw_mutated(strategy: st.SearchStrategy, n: int, seed: int, mutated: Callable[[Any], bool]) -> list:
    """Values of ``strategy`` until ``n`` of them are ``mutated`` (the valid ones drawn meanwhile kept
    between them), ending at the ``n``-th: rounds of :func:`draw`, each with its own seed, so the count
    per topic is what was asked, whatever share of the draws the strategy mutates."""
    out: list = []
    need, rnd = n, 0
    while need > 0:
        for x in draw(strategy, need + need // 3 + 8, seed + 7919 * rnd):
            out.append(x)
            need -= bool(mutated(x))
            if need == 0:
                break
        rnd += 1
    return out


def frame(record: str, value: dict, how: str) -> bytes | None:
    data = codec.encode(record, value)
    return {"garbage": b"\x00\x01 not a record", "null-value": None, "truncated": data[:len(data) // 2],
            "trailing-bytes": data + b"\x00\x00\x00",
            "unknown-fingerprint": data[:2] + b"\x13\x37\x13\x37\x13\x37\x13\x37" + data[10:]}[how]


def cases(record: str, topic: str, base: Callable[[str], dict], reader: oracle.Reader, n: int, run: str,
          seed: int) -> list[Case]:
    """Cases for one topic, ``n`` of them mutated: ``base(request_id)`` makes a valid record; about a
    fifth of the draws stay valid, between the mutated ones. What each must become is the documented
    contract's verdict (``tests/contract_oracle.py``) for ``reader`` at the time the case is built."""
    out = []
    # drawn first: drawing takes a while, and the records' times start when they are built
    drawn = draw_mutated(st.tuples(mutation(record), KEYS), n, seed, lambda d: d[0][0] != "")
    for i, ((name, value), key) in enumerate(drawn):
        rid = f"{run}-{topic}-{i}"
        rec = base(rid)
        if name in FRAMINGS:
            expect = "dead"
            data = frame(record, rec, name)
            out.append(Case(topic, b"" if data is None and key is None else key, data, rid, expect, name))
            continue
        if name:
            rec[name] = value
            if name == "request_id" and isinstance(value, str) and value.strip():
                rec[name] = rid = f"{value}~{rid}"  # unique: two cases never share an id
        data = codec.encode(record, rec)
        decoded, now = codec.decode(record, data), replace(reader, now_ns=time.time_ns())
        expect, broken = oracle.outcome(record, decoded, now), tuple(sorted(oracle.broken(record, decoded, now)))
        out.append(Case(topic, key, data, None if expect == "dead" else rec["request_id"], expect, name, broken))
    return out


def fragment_record(pipeline: str, slo_ms: float) -> Callable[[str], dict]:
    """A valid join fragment: the whole request (share 1) that the join answers at once."""
    def make(rid: str) -> dict:
        now = time.time_ns()
        return {"request_id": rid, "pipeline": pipeline, "status": "done", "reason": "", "created_ns": now,
                "deadline_ns": now + int(slo_ms * 1e6), "finished_ns": now, "content_type": "text/plain",
                "output": b"fuzz", "hops": [], "accuracy": 1.0, "parts": 1, "fragment": "1", "path": []}
    return make


def stage_config(pipe, stage: str) -> dict:
    """The StageConfig of ``stage``'s spec defaults: the config in force that control cases mutate."""
    return {**pipe.stage(stage).defaults.to_dict(), "epoch": 1, "planner_mode": "fuzz", "reason": "fuzz"}


def control_cases(pipeline: str, stage: str, base: dict, n: int, seed: int, spec) -> list[Case]:
    """Cases for the control topic, ``n`` of them refused by its rules: mutated ``StageConfig``s of
    ``stage``, framing mutations and bad keys; and the unmutated ``base`` (the config in force) as
    valid traffic. A mutation the rules accept is left out: a valid config legitimately changes what a
    stage runs."""
    made: dict[int, Case | None] = {}  # id of a draw -> its case, built once

    def mutated(d) -> bool:
        (name, value), key = d
        c = made[id(d)] = control_case(pipeline, stage, base, name, value, key, spec)
        return c is not None and c.mutated

    drawn = draw_mutated(st.tuples(mutation("StageConfig"), KEYS), n, seed, mutated)
    return [c for c in (made[id(d)] for d in drawn) if c is not None]


def control_case(pipeline: str, stage: str, base: dict, name: str, value: Any, key: bytes | None,
                 spec) -> Case | None:
    """One control record: ``base`` with ``name`` set to ``value`` (or framed as ``name`` says),
    under ``key``; None when the rules accept a mutation."""
    rec = dict(base)
    key = stage.encode() if key is None or name else key  # a field mutation under the stage's key
    if name in FRAMINGS:
        return Case("control", key or b"", frame("StageConfig", rec, name), None, "skipped", name)
    if name:
        rec[name] = value
    data = codec.encode("StageConfig", rec)
    if not oracle.stage_config_applies(key, codec.decode("StageConfig", data), pipeline, spec):
        return Case("control", key, data, None, "skipped", name)
    return None if name else Case("control", key, data, None, "applied", "")
