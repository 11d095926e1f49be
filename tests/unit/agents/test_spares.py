"""Loaded replicas that serve nothing (``slipstream.agents.stage.pool.SpareReplicas``): a scale-down parks the
replicas it frees, the pool tops them up to ``max_replicas`` in the background, and a scale-up of the
same variants on the same hardware serves with them at once, without a load."""
from __future__ import annotations

from aiokafka.structs import ConsumerRecord

from slipstream.agents import worker as w
from slipstream.agents.metrics import StageMetrics
from slipstream.agents.zoo import load_executor
from slipstream.streams import codec, kafka as kclient
from slipstream.streams.config import KafkaSettings
from slipstream.streams.control_io import read_record
from slipstream.streams.spec import parse_pipeline

PIPE = parse_pipeline({
    "name": "sp", "slo_ms": 300, "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
    "stages": [{"name": "s", "variants": [{"name": "a", "model": "noop", "accuracy": 0.5},
                                          {"name": "b", "model": "noop", "accuracy": 0.9}],
                "defaults": {"variant": "a", "hardware": "cpu-1", "partitions": 2}}]})


def config(offset: int, variant: str, replicas: int) -> dict:
    value = codec.encode("StageConfig", {
        "pipeline": "sp", "stage": "s", "variant": variant, "hardware": "cpu-1", "max_batch": 2,
        "batch_timeout_ms": 5.0, "replicas": replicas, "partitions": 2, "epoch": offset, "planner_mode": "t"})
    r = ConsumerRecord("c", 0, offset, 0, 0, b"s", value, None, 1, len(value), kclient.headers_for("StageConfig"))
    return read_record(r, "sp", PIPE)[1]


async def switch(sw: w.StageWorker, rec: dict) -> None:
    assert await sw.switch.offer(rec)
    sw.switch.at_boundary()


async def test_a_scale_up_after_a_scale_down_takes_the_freed_replica_and_a_variant_change_closes_it():
    loads = []

    def factory(variant, hw):
        loads.append(variant.name)
        return load_executor(variant, hw)

    sw = w.StageWorker(PIPE, "s", KafkaSettings(), factory, StageMetrics.create("sp", "s"), max_replicas=2)
    pool = sw.pool
    await sw.switch.start([config(1, "a", 2)])
    first, second = pool.fleet.replicas
    assert loads == ["a", "a"]

    await switch(sw, config(2, "a", 1))  # scale down: the second replica is parked, not closed
    assert pool.fleet.replicas == [first] and pool.spares.replicas == [second] and not second.retired
    assert pool.idle() is first  # a spare replica takes no work

    await switch(sw, config(3, "a", 2))  # scale up: the spare replica serves, nothing loads
    assert pool.fleet.replicas == [first, second] and pool.spares.replicas == [] and loads == ["a", "a"]

    await switch(sw, config(4, "a", 1))
    await switch(sw, config(5, "b", 1))  # another variant: the spare replica of "a" is closed, "b" loads
    assert loads == ["a", "a", "b"] and second.retired and first.retired
    await pool._spare_fill  # ... and a spare replica of "b" loads in the background
    (spare,) = pool.spares.replicas
    assert loads == ["a", "a", "b", "b"] and pool.idle() is not spare
    await switch(sw, config(6, "b", 2))  # the scale-up takes it: nothing loads
    assert loads == ["a", "a", "b", "b"] and pool.fleet.replicas[1] is spare
    assert len({r.index for r in pool.fleet.replicas}) == 2
    pool.close()


async def test_a_worker_started_below_its_replica_cap_loads_spare_replicas_up_to_it():
    sw = w.StageWorker(PIPE, "s", KafkaSettings(), load_executor, StageMetrics.create("sp", "s"), max_replicas=3)
    await sw.switch.start([config(1, "a", 1)])
    await sw.pool._spare_fill
    assert len(sw.pool.fleet.replicas) == 1 and len(sw.pool.spares.replicas) == 2
    assert len({r.index for r in [*sw.pool.fleet.replicas, *sw.pool.spares.replicas]}) == 3
    sw.pool.close()
