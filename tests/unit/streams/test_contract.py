"""The data contract (slipstream.streams.contract): every field of a request and of a join fragment is checked by
one rule set; a breach names the field and the value."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from slipstream.streams import contract
from slipstream.streams.client import request_record

NOW = 1_800_000_000 * 10**9
B = contract.Bounds("p", slo_ms=1000.0, stages=3, max_payload_bytes=1024)
SRC = contract.Bounds("p", slo_ms=1000.0, stages=3, max_payload_bytes=1024, source=True)


def req(**kw) -> dict:
    return {**request_record("p", "r1", NOW, 1000.0, "text/plain", b"x").to_dict(), **kw}


def frag(**kw) -> dict:
    return {"request_id": "r1", "pipeline": "p", "status": "done", "reason": "", "created_ns": NOW,
            "deadline_ns": NOW + 10**9, "finished_ns": NOW, "content_type": "text/plain", "output": b"x",
            "hops": [], "accuracy": 1.0, "parts": 1, "fragment": "1/2", "path": ["d:0/2"], **kw}


def hop(**kw) -> dict:
    return {"stage": "s", "variant": "v", "batch_size": 1, "enqueued_ns": NOW, "started_ns": NOW,
            "finished_ns": NOW, "worker": "w", "received_ns": NOW, "model_digest": "", **kw}


def test_a_valid_request_and_fragment_keep_the_contract():
    assert contract.check("InferenceRequest", req(), SRC, NOW) == []
    assert contract.check("InferenceRequest", req(fragment="2/3", path=["d:0/3"], hops=[hop()], accuracy=0.5),
                          B, NOW) == []
    assert contract.check("InferenceResult", frag(), B, NOW) == []


@pytest.mark.parametrize("field,value,rule", [
    ("request_id", "", "empty"), ("request_id", "x" * 257, "longer than 256"),
    ("pipeline", "other", "not this pipeline"),
    ("created_ns", -1, "negative"), ("created_ns", NOW + 61 * 10**9, "ahead"),
    ("deadline_ns", NOW, "not after created_ns"), ("deadline_ns", NOW + 11 * 10**9, "SLO"),
    ("accuracy_floor", math.nan, "[0, 1]"), ("accuracy_floor", 1.5, "[0, 1]"),
    ("content_type", "t" * 300, "longer"), ("payload", b"x" * 1025, "1024 bytes"),
    ("fragment", "abc", "not a fraction"), ("fragment", "1/0", "not a fraction"),
    ("fragment", "0/3", "not a fraction"), ("fragment", "3/2", "more than the whole"),
    ("fragment", " 1/2", "not a fraction"), ("fragment", "1" * 19, "not a fraction"),
    ("path", ["d:0/2"] * 5, "more than 4"), ("path", [""], "empty"),
    ("hops", [hop()] * 5, "more than 4"), ("hops", [hop(finished_ns=-5)], "hops[0].finished_ns"),
    ("hops", [hop(batch_size=-1)], "batch_size"), ("accuracy", math.inf, "[0, 1]"),
])
def test_each_broken_field_is_named_with_its_value(field, value, rule):
    (v, *_) = contract.check("InferenceRequest", req(**{field: value}), B, NOW)  # created_ns: deadline too
    assert v.field == field and rule in v.rule
    text = contract.describe([v])
    assert text.startswith("contract: ") and f"{field}=" in text


@pytest.mark.parametrize("field,value", [("fragment", "1/2"), ("path", ["d:0/2"]), ("hops", [hop()]),
                                         ("accuracy", 0.5)])
def test_at_the_pipeline_input_the_stage_fields_are_at_their_defaults(field, value):
    assert contract.check("InferenceRequest", req(**{field: value}), B, NOW) == []
    (v,) = contract.check("InferenceRequest", req(**{field: value}), SRC, NOW)
    assert v.field == field and "input" in v.rule


@pytest.mark.parametrize("field,value", [("fragment", "abc"), ("parts", 0), ("reason", "r" * 20000),
                                         ("output", b"o" * 2000), ("finished_ns", -1), ("pipeline", "q")])
def test_a_join_fragment_has_its_own_rules(field, value):
    (v,) = contract.check("InferenceResult", frag(**{field: value}), B, NOW)
    assert v.field == field


def test_an_id_or_pipeline_breach_cannot_be_answered_and_a_sanitized_request_takes_the_defaults():
    broken = contract.check("InferenceRequest", req(fragment="abc", path=["d:0/2"], accuracy=math.nan), B, NOW)
    assert [v.field for v in broken] == ["fragment", "accuracy"] and contract.answerable(broken)
    safe = contract.sanitized("InferenceRequest", req(fragment="abc", path=["d:0/2"], accuracy=math.nan), broken)
    assert safe["fragment"] == "1" and safe["path"] == [] and safe["accuracy"] == 1.0
    assert contract.check("InferenceRequest", safe, B, NOW) == []
    assert not contract.answerable(contract.check("InferenceRequest", req(request_id=""), B, NOW))
    assert not contract.answerable(contract.check("InferenceRequest", req(pipeline="q"), B, NOW))


def test_bounds_of_a_stage_know_whether_it_is_the_pipeline_input():
    pipe = SimpleNamespace(name="p", slo_ms=500.0, stages=[1, 2], source="a")
    assert contract.Bounds.of(pipe, "a", 10).source and not contract.Bounds.of(pipe, "b", 10).source
