"""The tuner against the real broker: arrival timestamps in, partitions grown, StageConfig and
ScalingAction out (workers are not started: the actuator is the dry-run one)."""
from __future__ import annotations

import asyncio
import time

import numpy as np

from slipstream.streams import admin, codec, kafka as kclient, topics
from slipstream.streams.spec import parse_pipeline
from slipstream.streams.topics import all_topics
from slipstream.streams import control_io as kafka_io
from slipstream.tuner.actuators import DryRunActuator
from slipstream.tuner.envelope import doubling_windows
from slipstream.tuner.policy import StageSizing, TunerConfig, TunerPlan
from slipstream.tuner.service import ServiceSettings, TunerService

from .helpers import drain


def spec(name: str) -> dict:
    return {"name": name, "slo_ms": 300,
            "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
            "stages": [{"name": "src", "variants": [{"name": "v", "model": "noop", "accuracy": 0.9}],
                        "defaults": {"variant": "v", "hardware": "cpu-1", "replicas": 1, "partitions": 2}}]}


async def test_rate_step_on_the_input_topic_scales_up_grows_and_publishes(kafka, unique):
    pipe = parse_pipeline(spec(unique))
    await admin.ensure_topics(kafka, all_topics(pipe))
    rng = np.random.default_rng(0)
    sample = np.cumsum(rng.exponential(1 / 20, 6000))  # planned: 20 qps, 1 replica of mu 25
    plan = TunerPlan.from_sample(sample, doubling_windows(0.05), (StageSizing("src", 1, 25.0, 1.0),))

    now = time.time_ns()
    prod = kclient.producer(kafka)
    await prod.start()
    try:  # the last 3 s at 100 qps: five times the plan
        futs = [await kclient.send(prod, topics.stage_input(unique, "src"), "InferenceRequest",
                                   {"request_id": f"r{i}", "pipeline": unique, "created_ns": ts,
                                    "deadline_ns": ts + 300_000_000, "accuracy_floor": None,
                                    "content_type": "application/octet-stream", "payload": b""},
                                   key=f"r{i}", timestamp_ns=ts)
                for i, ts in enumerate(range(now - 3_000_000_000, now, 10_000_000))]
        await asyncio.gather(*futs)
    finally:
        await prod.stop()

    publisher = kafka_io.KafkaPublisher(kafka, unique)
    await publisher.start()
    partitions = await kafka_io.stage_partitions(kafka, unique, ["src"])
    # the burst is in the past by the time the tuner's look-back has read it (seconds on a cold broker):
    # a scale-up horizon spanning the set-up keeps the test about the wiring, not the set-up's speed
    config = TunerConfig(up_horizon_s=60.0)
    service = TunerService(pipe, plan, config, DryRunActuator(), partitions=partitions,
                           publish=publisher.publish, grow=kafka_io.grower(kafka),
                           settings=ServiceSettings(interval_s=0.2))
    arrivals = kafka_io.KafkaArrivals(kafka, unique, "src", on_stage_config=service.on_stage_config)
    await arrivals.start()
    stop = asyncio.Event()
    decisions = []

    def on_decision(d):
        decisions.append(d)
        if d.changes:
            stop.set()

    try:
        await asyncio.wait_for(service.run(arrivals, stop, on_decision), 30)
    finally:
        await arrivals.stop()
        await publisher.stop()

    assert service.tracker.arrivals == 300  # in order (offset snapshots): none held back
    change = decisions[-1].changes[0]
    assert change.previous == 1 and change.replicas >= 4
    counts = await admin.partition_counts(kafka, [topics.stage_input(unique, "src")])
    assert counts[topics.stage_input(unique, "src")] == 8  # next power of two >= 1.5 x 5 replicas
    configs = [codec.decode("StageConfig", r.value) for r in await drain(kafka, topics.control(unique), 1)]
    actions = [codec.decode("ScalingAction", r.value) for r in await drain(kafka, topics.scaling(unique), 1)]
    assert configs[0]["replicas"] == change.replicas and configs[0]["partitions"] == 8
    assert configs[0]["epoch"] == 0 and configs[0]["reason"].startswith("scale-up")
    assert actions[0]["previous_replicas"] == 1 and actions[0]["live_rate_qps"] > actions[0]["planned_rate_qps"]


async def test_arrivals_poll_offsets_while_the_control_follower_long_polls(kafka, unique, monkeypatch):
    """The live arrivals' resolution is ``poll_ms``: the end offsets are asked on a client that never
    fetches. Asked on the control-topic follower's own connection they wait behind its fetch, which the
    broker holds for the whole fetch wait on a quiet topic (here 5 s): one poll per 5 s, not per 20 ms."""
    monkeypatch.setattr(kclient, "FETCH_MAX_WAIT_MS", 5000)
    pipe = parse_pipeline(spec(unique))
    await admin.ensure_topics(kafka, all_topics(pipe))
    arrivals = kafka_io.KafkaArrivals(kafka, unique, "src", on_stage_config=lambda rec: None, lookback_s=0,
                                      poll_ms=20)
    await arrivals.start()
    polls, fifth = 0, asyncio.Event()
    ask = arrivals._offsets.end_offsets

    async def counted(tps):
        nonlocal polls
        polls += 1
        if polls == 5:
            fifth.set()
        return await ask(tps)

    arrivals._offsets.end_offsets = counted
    reader = asyncio.create_task(anext(aiter(arrivals)))  # polls until an arrival: none comes
    try:
        await asyncio.wait_for(fifth.wait(), 4.0)  # five polls before the follower's first fetch returns
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
        await arrivals.stop()
