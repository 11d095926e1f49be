"""Two writers that put the same ``epoch`` field on their StageConfigs (the planner and the tuner racing)
are both applied, in the order they were written: read from the topic, each record's epoch is its offset
(the broker side: tests/integration/test_control_plane.py)."""
from aiokafka.structs import ConsumerRecord

from slipstream.agents.control import accept, defaults
from slipstream.streams import codec, kafka as kclient
from slipstream.streams.control_io import read_record
from slipstream.streams.spec import parse_pipeline

PIPE = parse_pipeline({
    "name": "p", "slo_ms": 300, "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
    "stages": [{"name": "s", "variants": [{"name": "a", "model": "noop", "accuracy": 0.5},
                                          {"name": "b", "model": "noop", "accuracy": 0.9}],
                "defaults": {"variant": "a", "hardware": "cpu-1", "partitions": 2}}]})


def written(offset: int, variant: str, epoch: int) -> ConsumerRecord:
    value = codec.encode("StageConfig", {
        "pipeline": "p", "stage": "s", "variant": variant, "hardware": "cpu-1", "max_batch": 2,
        "batch_timeout_ms": 5.0, "replicas": 1, "partitions": 2, "epoch": epoch, "planner_mode": "t"})
    return ConsumerRecord("c", 0, offset, 0, 0, b"s", value, None, 1, len(value), kclient.headers_for("StageConfig"))


def test_equal_epoch_fields_apply_in_write_order_and_a_replay_applies_nothing_twice():
    current = defaults(PIPE, "s")
    applied = []
    for r in (written(5, "b", 7), written(6, "a", 7), written(9, "b", 3)):  # fields: equal, then lower
        cfg, why = accept(PIPE, "s", read_record(r, "p", PIPE)[1], current)
        assert cfg is not None, why
        current = cfg
        applied.append((cfg.epoch, cfg.variant))
    assert applied == [(5, "b"), (6, "a"), (9, "b")]
    cfg, why = accept(PIPE, "s", read_record(written(6, "a", 99), "p", PIPE)[1], current)  # read again
    assert cfg is None and why == "stale epoch 6 <= 9 in force"
