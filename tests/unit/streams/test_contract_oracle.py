"""The data contract's code (``slipstream.streams.contract``) against its documented statement
(``tests/contract_oracle.py``, the fuzz suite's oracle): on records drawn with the fuzz suite's
mutations, both name the same broken fields (and refuse the same control records), so the oracle the
fuzz suite trusts is the contract the docs promise and the workers check."""
import time

import pytest
from pathlib import Path

from hypothesis import strategies as st

from slipstream.streams import codec, contract
from slipstream.streams.client import request_record
from slipstream.streams.control_rules import InvalidControl, check as check_control, check_key
from slipstream.streams.spec import load_pipeline
from tests import contract_oracle as oracle, fuzzing

SLO_MS, STAGES, LIMIT = 250.0, 3, 4096
READERS = [("InferenceRequest", True), ("InferenceRequest", False), ("InferenceResult", False)]


def base(record: str):
    if record == "InferenceRequest":
        return lambda rid: request_record("p", rid, time.time_ns(), SLO_MS, "application/octet-stream",
                                         b"x" * 64).to_dict()
    return fuzzing.fragment_record("p", SLO_MS)


def verdicts(record: str, at_input: bool, rec: dict) -> tuple[set[str], set[str]]:
    data = codec.encode(record, rec)
    value, now = codec.decode(record, data), time.time_ns()
    code = {v.field for v in contract.check(record, value, contract.Bounds("p", SLO_MS, STAGES, LIMIT, at_input), now)}
    return code, oracle.broken(record, value, oracle.Reader("p", SLO_MS, STAGES, LIMIT, at_input, now))


@pytest.mark.parametrize("record,at_input", READERS)
def test_code_and_documented_contract_agree_on_mutated_records(record, at_input):
    disagree, broken_seen = [], 0
    for name, value in fuzzing.draw(fuzzing.mutation(record), 200, seed=20261128):
        if name in fuzzing.FRAMINGS:
            continue  # not a decodable record: nothing to judge
        rec = base(record)("r1")
        if name:
            rec[name] = value
        code, doc = verdicts(record, at_input, rec)
        broken_seen += bool(doc)
        if code != doc:
            disagree.append(f"{name}={contract.show(value)}: code {sorted(code)}, docs {sorted(doc)}")
    assert not disagree, "\n".join(disagree[:20])
    assert broken_seen > 20  # the draws do reach the rules


def hop(**kw):
    now = time.time_ns()
    return {"stage": "s0", "variant": "v", "worker": "w", "model_digest": "", "batch_size": 1, "enqueued_ns": now,
            "started_ns": now, "finished_ns": now, "received_ns": now, **kw}


SLO_NS = int(SLO_MS * 1e6)
# each rule's edges, on both sides: values a random draw seldom hits
EDGES = [
    *[("deadline_ns", lambda r, k=k: r["created_ns"] + int(k * SLO_NS)) for k in (0, 1e-9, 1, 9.99, 10, 10.01, 20)],
    *[("created_ns", lambda r, s=s: time.time_ns() + s * 10**9) for s in (-1, 59, 61)],
    ("created_ns", lambda r: -1),
    *[("request_id", lambda r, n=n: "i" * n) for n in (0, 256, 257)],
    *[("content_type", lambda r, n=n: "c" * n) for n in (256, 257)],
    *[("fragment", lambda r, f=f: f) for f in ("1", "1/1", "2/2", "1/2", "0/2", "1/0", "1/" + "9" * 18, "1/" + "9" * 19)],
    *[("path", lambda r, n=n: ["s"] * n) for n in (0, 1, STAGES + 1, STAGES + 2)],
    ("path", lambda r: ["s" * 257]),
    *[("hops", lambda r, n=n: [hop()] * n) for n in (1, STAGES + 1, STAGES + 2)],
    *[("hops", lambda r, kw=kw: [hop(**kw)]) for kw in ({"batch_size": 10**6}, {"batch_size": 10**6 + 1},
                                                        {"batch_size": -1}, {"worker": "w" * 257}, {"started_ns": -5})],
    *[("accuracy", lambda r, a=a: a) for a in (0.0, 0.5, 1.0, 1.0000001, -0.0)],
    *[("accuracy_floor", lambda r, a=a: a) for a in (None, 0.0, 1.0, 1.5, float("nan"))],
    *[("payload", lambda r, n=n: b"p" * n) for n in (LIMIT, LIMIT + 1)],
]
FRAGMENT_EDGES = [
    *[("parts", lambda r, n=n: n) for n in (0, 1, 10**6, 10**6 + 1)],
    *[("reason", lambda r, n=n: "e" * n) for n in (16_384, 16_385)],
    *[("output", lambda r, n=n: b"o" * n) for n in (LIMIT, LIMIT + 1)],
    *[("finished_ns", lambda r, s=s: time.time_ns() + s * 10**9) for s in (59, 61)],
]


def edge_cases():
    for record, at_input in READERS:
        edges = EDGES if record == "InferenceRequest" else FRAGMENT_EDGES + [
            e for e in EDGES if e[0] not in ("payload", "accuracy_floor")]
        for i, (field, make) in enumerate(edges):
            yield pytest.param(record, at_input, field, make, id=f"{record}-{at_input}-{field}-{i}")


@pytest.mark.parametrize("record,at_input,field,make", list(edge_cases()))
def test_code_and_documented_contract_agree_at_each_rules_edges(record, at_input, field, make):
    rec = base(record)("r1")
    rec[field] = make(rec)
    code, doc = verdicts(record, at_input, rec)
    assert code == doc


@pytest.mark.parametrize("field,value,at_input", [
    ("fragment", "2/3", True), ("fragment", "3/2", False), ("fragment", "01/2", False), ("fragment", "1/" + "9" * 19, False),
    ("accuracy", 0.5, True), ("deadline_ns", 0, False), ("path", ["a", ""], False), ("request_id", "   ", False),
])
def test_the_oracle_refuses_what_the_table_refuses(field, value, at_input):
    rec = base("InferenceRequest")("r1")
    rec[field] = value
    assert field in verdicts("InferenceRequest", at_input, rec)[1]


def test_the_oracle_keeps_a_valid_request_and_a_long_fraction():
    rec = base("InferenceRequest")("r1")
    rec["fragment"], rec["path"] = "1/" + "9" * 18, ["s0"]
    assert verdicts("InferenceRequest", False, rec)[1] == set()
    assert oracle.outcome("InferenceRequest", {**rec, "pipeline": "q"},
                          oracle.Reader("p", SLO_MS, STAGES, LIMIT, False, time.time_ns())) == "dead"


FANOUT3 = Path(__file__).parents[2] / "integration" / "pipelines" / "fanout3.yaml"


def code_applies(key, rec, pipe) -> bool:
    try:
        check_control("StageConfig", check_key(key), rec, pipe.name, pipe)
    except InvalidControl:
        return False
    return True


def test_code_and_documented_control_rules_agree_on_mutated_stage_configs():
    pipe = load_pipeline(FANOUT3)
    base = fuzzing.stage_config(pipe, "classify")
    d = pipe.stage("classify").defaults
    edges = [("max_batch", 4096), ("max_batch", 4097), ("replicas", 1024), ("replicas", 1025), ("partitions", 0),
             ("batch_timeout_ms", 60_000.0), ("batch_timeout_ms", 60_000.5), ("epoch", 2**53), ("epoch", 2**53 + 1),
             ("routing", {d.variant: 0.0}), ("routing", {d.variant: 0.5}), ("digests", {"nope": "x"}),
             ("cost_per_hour", float("inf")), ("predicted_p99_ms", -1.0), ("stage", "nope"), ("hardware", "tpu")]
    drawn = fuzzing.draw(st.tuples(fuzzing.mutation("StageConfig"), fuzzing.KEYS), 300, seed=11)
    disagree, refused = [], 0
    for (name, value), key in [((f, v), None) for f, v in edges] + drawn:
        if name in fuzzing.FRAMINGS:
            continue
        rec, key = {**base, **({name: value} if name else {})}, b"classify" if key is None else key
        rec = codec.decode("StageConfig", codec.encode("StageConfig", rec))
        code, doc = code_applies(key, rec, pipe), oracle.stage_config_applies(key, rec, pipe.name, pipe)
        refused += not doc
        if code != doc:
            disagree.append(f"{name}={contract.show(value)} key={key[:20]!r}: code {code}, docs {doc}")
    assert not disagree, "\n".join(disagree[:20])
    assert refused > 50
