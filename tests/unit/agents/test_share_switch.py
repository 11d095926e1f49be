"""A loki stage's ladder (``slipstream.planner.capacity.ladders``): the variants a StageConfig names with share 0
are loaded with the config, beside serving, so a later config that only moves shares is a routing
change at a window boundary, with no model load (issue 40)."""
from __future__ import annotations

from aiokafka.structs import ConsumerRecord

from slipstream.agents import worker as w
from slipstream.agents.control import loaded, variants
from slipstream.agents.metrics import StageMetrics
from slipstream.agents.window import split_variants
from slipstream.agents.zoo import load_executor
from slipstream.streams import codec, kafka as kclient
from slipstream.streams.config import KafkaSettings
from slipstream.streams.control_io import read_record
from slipstream.streams.spec import parse_pipeline
from tests.control_records import request

PIPE = parse_pipeline({
    "name": "sp", "slo_ms": 300, "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
    "stages": [{"name": "s", "variants": [{"name": "cheap", "model": "noop", "accuracy": 0.5},
                                          {"name": "best", "model": "noop", "accuracy": 0.9}],
                "defaults": {"variant": "best", "hardware": "cpu-1", "partitions": 2}}]})


def config(offset: int, routing: dict, replicas: int = 2) -> dict:
    value = codec.encode("StageConfig", {
        "pipeline": "sp", "stage": "s", "variant": "best", "hardware": "cpu-1", "max_batch": 2,
        "batch_timeout_ms": 5.0, "replicas": replicas, "partitions": 2, "epoch": offset, "planner_mode": "loki",
        "routing": routing})
    r = ConsumerRecord("c", 0, offset, 0, 0, b"s", value, None, 1, len(value), kclient.headers_for("StageConfig"))
    return read_record(r, "sp", PIPE)[1]


class Item:
    def __init__(self, i: int) -> None:
        self.req = request(request_id=f"r-{i}")


def counting_worker() -> tuple[w.StageWorker, list[str]]:
    loads: list[str] = []

    def factory(variant, hw):
        loads.append(variant.name)
        return load_executor(variant, hw)

    return w.StageWorker(PIPE, "s", KafkaSettings(), factory, StageMetrics.create("sp", "s"), max_replicas=2), loads


async def test_a_share_change_over_loaded_variants_loads_no_executor_and_routes_at_the_boundary():
    sw, loads = counting_worker()
    switch, pool = sw.switch, sw.pool
    await switch.start([config(1, {"best": 1.0, "cheap": 0.0})])
    assert sorted(loads) == ["best", "best", "cheap", "cheap"]  # the ladder is loaded with the config
    assert loaded(switch.config) == ("best", "cheap") and variants(switch.config) == ("best",)  # what serves: best
    replicas, window = list(pool.fleet.replicas), [Item(i) for i in range(200)]
    assert set(split_variants(window, switch.config, {"best": 0.9, "cheap": 0.5})[0]) == {"best"}

    assert await switch.offer(config(2, {"best": 0.4, "cheap": 0.6}))
    assert len(loads) == 4  # accepted and prepared: nothing loaded
    assert set(split_variants(window, switch.config, {"best": 0.9, "cheap": 0.5})[0]) == {"best"}  # not yet in force
    switch.at_boundary()
    assert len(loads) == 4 and pool.fleet.replicas == replicas and not any(r.retired for r in replicas)
    groups = split_variants(window, switch.config, {"best": 0.9, "cheap": 0.5})[0]
    assert 100 <= len(groups["cheap"]) <= 140 and len(groups["cheap"]) + len(groups["best"]) == 200

    assert await switch.offer(config(3, {"best": 1.0, "cheap": 0.0}, replicas=1))  # back, and a scale-down
    switch.at_boundary()
    assert len(loads) == 4 and pool.fleet.replicas == replicas[:1] and pool.spares.replicas == replicas[1:]
    pool.close()


async def test_a_variant_the_config_does_not_name_is_loaded_only_when_a_config_routes_to_it():
    """The contrast: without the ladder named, moving shares to a variant loads it (the burst's
    model load the ladder exists to avoid)."""
    sw, loads = counting_worker()
    await sw.switch.start([config(1, {})])
    assert loads == ["best", "best"]
    assert await sw.switch.offer(config(2, {"best": 0.4, "cheap": 0.6}))
    assert sorted(loads[2:]) == ["best", "best", "cheap", "cheap"]
    sw.pool.close()
