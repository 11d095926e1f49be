"""The control topic's one rule set (``slipstream.streams.control_rules``) and its reader (``control_io.read_record``):
every bad key, type, body and field is refused naming the field and the value; a valid record's epoch is
its offset; the written epoch never overflows (the broker side: tests/integration/test_control_plane.py)."""
import math

import pytest
from aiokafka.structs import ConsumerRecord

from slipstream.streams import codec, kafka as kclient
from slipstream.streams.control_io import read_record
from slipstream.streams.control_rules import EPOCH_MAX, InvalidControl, check, check_key, next_epoch
from slipstream.streams.spec import parse_pipeline

PIPE = parse_pipeline({
    "name": "p", "slo_ms": 300, "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
    "stages": [{"name": "s", "variants": [{"name": "a", "model": "noop", "accuracy": 0.5},
                                          {"name": "b", "model": "noop", "accuracy": 0.9}],
                "defaults": {"variant": "a", "hardware": "cpu-1", "partitions": 2}}]})
CONFIG = {"pipeline": "p", "stage": "s", "variant": "a", "hardware": "cpu-1", "max_batch": 4,
          "batch_timeout_ms": 5.0, "replicas": 2, "partitions": 2, "epoch": 7, "planner_mode": "milp",
          "predicted_p99_ms": 12.0, "routing": {"a": 0.5, "b": 0.5}, "cost_per_hour": 0.1, "reason": "",
          "digests": {}}
HANDOFF = {"pipeline": "p", "epoch": 4, "mean_rate_qps": 10.0, "windows_s": [0.1, 0.2], "rates_qps": [30.0, 20.0],
           "stages": [{"stage": "s", "replicas": 2, "mu_qps": 8.0, "visit_ratio": 1.0}], "at_ns": 5}


RUNG = {"variant": "a", "accuracy": 0.5, "share": 1.0, "rate_qps": 8.0, "window_qps": [20.0, 10.0],
        "service_ms": [5.0, 9.0]}
CAPACITY = {"stage": "s", "budget_ms": 250.0, "rate_qps": 8.0, "window_qps": [20.0, 10.0], "variant": "a",
            "service_ms": [5.0, 9.0], "ladder": [RUNG, {**RUNG, "variant": "b", "share": 0.0, "rate_qps": 0.0,
                                                        "window_qps": []}]}


def record(value: bytes, key: bytes | None = b"s", kind: str = "StageConfig", offset: int = 3,
           partition: int = 0) -> ConsumerRecord:
    return ConsumerRecord("slipstream.p.control", partition, offset, 0, 0, key, value, None,
                          len(key or b""), len(value or b""), kclient.headers_for(kind))


def test_valid_records_pass_and_read_with_their_offset_as_epoch():
    check("StageConfig", "s", CONFIG, "p", PIPE)
    check("TunerHandoff", "~handoff", HANDOFF, "p", PIPE)
    kind, rec = read_record(record(codec.encode("StageConfig", CONFIG), offset=41), "p", PIPE)
    assert kind == "StageConfig" and rec.epoch == 41 and rec.variant == "a"
    kind, rec = read_record(record(codec.encode("TunerHandoff", HANDOFF), b"~handoff", "TunerHandoff", 42), "p")
    assert kind == "TunerHandoff" and rec.epoch == 42


@pytest.mark.parametrize("key, says", [(None, "key: missing"), (b"\xff\xfe", "key: not UTF-8"),
                                       (b"t", "key: 't' is not the record's stage 's'")])
def test_a_bad_key_is_refused(key, says):
    with pytest.raises(InvalidControl, match=says):
        read_record(record(codec.encode("StageConfig", CONFIG), key), "p", PIPE)


def test_key_check_names_the_bytes():
    assert check_key(b"s") == "s"
    with pytest.raises(InvalidControl, match="hex c3 28"):
        check_key(b"\xc3\x28")


@pytest.mark.parametrize("change, says", [
    ({"epoch": 2**63 - 1}, "epoch: must be an integer in"),
    ({"epoch": -1}, "epoch"),
    ({"pipeline": "q"}, "pipeline: 'q', not 'p'"),
    ({"stage": "zz"}, "key"),
    ({"variant": "zz"}, "variant: unknown variant 'zz'"),
    ({"routing": {"a": 1.0, "zz": 1.0}}, "routing: unknown variant 'zz'"),
    ({"digests": {"zz": "abc"}}, "digests: unknown variant 'zz'"),
    ({"hardware": "gpu-9"}, "hardware: unknown 'gpu-9'"),
    ({"max_batch": 0}, "max_batch"), ({"max_batch": 5000}, "max_batch"),
    ({"batch_timeout_ms": math.nan}, "batch_timeout_ms: must be a finite number"),
    ({"batch_timeout_ms": -1.0}, "batch_timeout_ms"), ({"batch_timeout_ms": 1e9}, "batch_timeout_ms"),
    ({"replicas": 0}, "replicas"), ({"replicas": 2**31 - 1}, "replicas"),
    ({"partitions": 0}, "partitions"),
    ({"routing": {"a": math.inf}}, r"routing\['a'\]"), ({"routing": {"a": -1.0, "b": 2.0}}, r"routing\['a'\]"),
    ({"routing": {"a": 0.0, "b": 0.0}}, "routing: shares must sum to more than 0"),
    ({"cost_per_hour": math.nan}, "cost_per_hour"), ({"predicted_p99_ms": -math.inf}, "predicted_p99_ms"),
])
def test_every_stage_config_field_is_bounded(change, says):
    rec = {**CONFIG, **change}
    with pytest.raises(InvalidControl, match=says):
        check("StageConfig", "s", rec, "p", PIPE)


@pytest.mark.parametrize("change, says", [
    ({"epoch": 2**63 - 1}, "epoch"),
    ({"windows_s": [0.1], "rates_qps": [1.0, 2.0]}, "windows_s/rates_qps"),
    ({"windows_s": [], "rates_qps": []}, "windows_s/rates_qps"),
    ({"windows_s": [0.0, 0.2]}, r"windows_s\[0\]"), ({"rates_qps": [math.nan, 1.0]}, r"rates_qps\[0\]"),
    ({"mean_rate_qps": math.inf}, "mean_rate_qps"),
    ({"stages": []}, "stages: 1 to"),
    ({"stages": [{"stage": "zz", "replicas": 1, "mu_qps": 1.0, "visit_ratio": 1.0}]}, r"stages\[0\].stage"),
    ({"stages": [{"stage": "s", "replicas": -1, "mu_qps": 1.0, "visit_ratio": 1.0}]}, r"stages\[0\].replicas"),
    ({"stages": [{"stage": "s", "replicas": 1, "mu_qps": 0.0, "visit_ratio": 1.0}]}, r"stages\[0\].mu_qps"),
    # sane ranges: no reader's arithmetic (the gateway's shedding, the tuner's sizing) overflows on them
    ({"stages": [{"stage": "s", "replicas": 1, "mu_qps": 5e-324, "visit_ratio": 1.0}]}, r"stages\[0\].mu_qps"),
    ({"stages": [{"stage": "s", "replicas": 1, "mu_qps": 1e-6, "visit_ratio": 1.0}]}, r"stages\[0\].mu_qps"),
    ({"stages": [{"stage": "s", "replicas": 1, "mu_qps": 1e9, "visit_ratio": 1.0}]}, r"stages\[0\].mu_qps"),
    ({"stages": [{"stage": "s", "replicas": 1, "mu_qps": 1.0, "visit_ratio": 1e300}]}, r"stages\[0\].visit_ratio"),
    ({"stages": [{"stage": "s", "replicas": 2**31 - 1, "mu_qps": 1.0, "visit_ratio": 1.0}]}, r"stages\[0\].replicas"),
    ({"mean_rate_qps": 1e300}, "mean_rate_qps"), ({"mean_rate_qps": 5e-324}, "mean_rate_qps"),
    ({"rates_qps": [1e12, 1.0]}, r"rates_qps\[0\]"), ({"windows_s": [1e9, 0.2]}, r"windows_s\[0\]"),
    ({"capacity": [{**CAPACITY, "stage": "zz"}]}, r"capacity\[0\].stage"),
    ({"capacity": [{**CAPACITY, "rate_qps": 5e-324}]}, r"capacity\[0\].rate_qps"),
    ({"capacity": [{**CAPACITY, "budget_ms": math.inf}]}, r"capacity\[0\].budget_ms"),
    ({"capacity": [{**CAPACITY, "window_qps": [math.nan, 1.0]}]}, r"capacity\[0\].window_qps\[0\]"),
    ({"capacity": [{**CAPACITY, "window_qps": [1.0] * 65}]}, r"capacity\[0\].window_qps: 0 to 64"),
    ({"capacity": [{**CAPACITY, "service_ms": [-1.0]}]}, r"capacity\[0\].service_ms\[0\]"),
    ({"capacity": [{**CAPACITY, "ladder": [{**RUNG, "rate_qps": 1e-300}]}]}, r"capacity\[0\].ladder\[0\].rate_qps"),
    ({"capacity": [{**CAPACITY, "ladder": [{**RUNG, "accuracy": 1.5}]}]}, r"capacity\[0\].ladder\[0\].accuracy"),
    ({"capacity": [{**CAPACITY, "ladder": [{**RUNG, "share": math.inf}]}]}, r"capacity\[0\].ladder\[0\].share"),
    ({"capacity": [{**CAPACITY, "ladder": [{**RUNG, "window_qps": [1e10]}]}]},
     r"capacity\[0\].ladder\[0\].window_qps\[0\]"),
])
def test_every_handoff_field_is_bounded(change, says):
    with pytest.raises(InvalidControl, match=says):
        check("TunerHandoff", "~handoff", {**HANDOFF, **change}, "p", PIPE)


def test_sane_handoff_numbers_at_the_edges_pass():
    check("TunerHandoff", "~handoff", {**HANDOFF, "capacity": [CAPACITY]}, "p", PIPE)
    edges = {"mean_rate_qps": 0.0, "rates_qps": [0.0, 2e-6], "windows_s": [1e-9, 86_400.0],
             "stages": [{"stage": "s", "replicas": 0, "mu_qps": 1.1e-6, "visit_ratio": 0.0},
                        {"stage": "s", "replicas": 1024, "mu_qps": 9.9e8, "visit_ratio": 1e6}]}
    check("TunerHandoff", "~handoff", {**HANDOFF, **edges}, "p", PIPE)


def test_bodies_types_and_partitions_that_cannot_be_read_are_refused():
    with pytest.raises(InvalidControl, match="undecodable|truncated|trailing"):
        read_record(record(b"\xc3\x01" + codec.codec("StageConfig").fp + b"\xffgarbage"), "p", PIPE)
    with pytest.raises(InvalidControl, match="unknown writer schema, fingerprint 0000000000000000"):
        read_record(record(b"\xc3\x01" + b"\x00" * 8 + b"garbage"), "p", PIPE)
    with pytest.raises(InvalidControl, match="null value"):
        read_record(record(None), "p", PIPE)
    with pytest.raises(InvalidControl, match="record type: 'Nope'"):
        read_record(record(codec.encode("StageConfig", CONFIG), kind="Nope"), "p", PIPE)
    with pytest.raises(InvalidControl, match="one partition"):
        read_record(record(codec.encode("StageConfig", CONFIG), partition=1), "p", PIPE)


def test_a_reader_without_the_spec_checks_everything_but_names():
    check("StageConfig", "s", {**CONFIG, "variant": "zz"}, "p")  # no spec: names unchecked
    with pytest.raises(InvalidControl, match="max_batch"):
        check("StageConfig", "s", {**CONFIG, "max_batch": 0}, "p")


def test_the_written_epoch_follows_what_was_read_and_never_overflows():
    assert next_epoch() == 0
    assert next_epoch(4, 9, 2) == 10
    assert next_epoch(EPOCH_MAX) == EPOCH_MAX
    assert next_epoch(2**63 - 1) == EPOCH_MAX  # a value read from a file or an old topic
