"""The pure parts of the control-topic readers: records picked by their schema header, the newest
hand-off of the pipeline (the broker side: tests/integration/test_tuner_handoff.py)."""
from dataclasses import replace

from aiokafka.structs import ConsumerRecord

from slipstream.schemas.records import TunerHandoff
from slipstream.streams import codec, kafka as kclient
from slipstream.streams.control_io import control_records, newest_handoff

HANDOFF = {"pipeline": "p", "epoch": 4, "mean_rate_qps": 10.0, "windows_s": [0.1, 0.2], "rates_qps": [30.0, 20.0],
           "stages": [{"stage": "s", "replicas": 2, "mu_qps": 8.0, "visit_ratio": 1.0}], "at_ns": 5, "capacity": [], "host": None}
CONFIG = {"pipeline": "p", "stage": "s", "variant": "v", "hardware": "cpu", "max_batch": 1, "batch_timeout_ms": 0.0,
          "replicas": 1, "partitions": 2, "epoch": 9, "planner_mode": "milp", "predicted_p99_ms": None,
          "routing": {}, "cost_per_hour": 0.1, "reason": ""}


def record(offset: int, kind: str | None, value: bytes, key: bytes | None = None) -> ConsumerRecord:
    headers = kclient.headers_for(kind) if kind else []
    key = key if key is not None else (b"~handoff" if kind == "TunerHandoff" else b"s")
    return ConsumerRecord("t", 0, offset, 0, 0, key, value, None, len(key), len(value), headers)


def test_records_are_picked_by_their_schema_header_and_undecodable_ones_skipped():
    records = [record(0, "StageConfig", codec.encode("StageConfig", CONFIG)),
               record(1, "TunerHandoff", codec.encode("TunerHandoff", HANDOFF)),
               record(2, "TunerHandoff", b"not avro"),
               record(3, None, codec.encode("StageConfig", CONFIG))]  # no header: a StageConfig
    assert control_records(records, "TunerHandoff", "p") == [TunerHandoff.from_dict(HANDOFF | {"epoch": 1})]
    # read from the topic, a record's epoch is its offset, whatever the field says
    assert [r.epoch for r in control_records(records, "StageConfig", "p")] == [0, 3]


def test_the_newest_handoff_is_the_pipelines_highest_epoch():
    assert newest_handoff([], "p") is None
    newest = TunerHandoff.from_dict(HANDOFF)
    older, other = replace(newest, epoch=3), replace(newest, pipeline="q", epoch=8)
    assert newest_handoff([newest, older, other], "p") == newest
    assert newest_handoff([other], "p") is None
