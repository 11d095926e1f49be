"""Consumer lag measured by the control plane: the tuner reads each stage group's lag from the broker
(end offsets minus committed offsets) and exports it while the stage runs no worker at all (scaled to
zero or not scheduled: no worker's own gauge exists then)."""
from __future__ import annotations

import asyncio
import socket
import time
import urllib.request

import numpy as np
from aiokafka import TopicPartition
from aiokafka.structs import OffsetAndMetadata

from slipstream.streams import admin, kafka as kclient, topics
from slipstream.streams.metrics_http import MetricsAddr
from slipstream.streams.spec import parse_pipeline
from slipstream.streams.topics import all_topics
from slipstream.tuner.actuators import DryRunActuator
from slipstream.tuner.envelope import doubling_windows
from slipstream.tuner.policy import StageSizing, TunerConfig, TunerPlan
from slipstream.tuner.run import run_tuner


def spec(name: str) -> dict:
    return {"name": name, "slo_ms": 300,
            "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
            "stages": [{"name": "src", "variants": [{"name": "v", "model": "noop", "accuracy": 0.9}],
                        "defaults": {"variant": "v", "hardware": "cpu-1", "replicas": 1, "partitions": 2}}]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lag_gauge(port: int, pipeline: str) -> float | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
            body = resp.read().decode()
    except OSError:
        return None
    want = f'slipstream_group_lag_records{{pipeline="{pipeline}",stage="src"}} '
    return next((float(line[len(want):]) for line in body.splitlines() if line.startswith(want)), None)


async def until_lag(port: int, pipeline: str, value: float, timeout_s: float = 30) -> None:
    seen = None
    try:
        async with asyncio.timeout(timeout_s):
            while (seen := await asyncio.to_thread(lag_gauge, port, pipeline)) != value:
                await asyncio.sleep(0.2)
    except TimeoutError:
        raise AssertionError(f"slipstream_group_lag_records: {seen}, want {value}") from None


async def test_the_tuner_exports_a_stages_lag_read_from_the_broker_with_no_workers(kafka, unique):
    pipe = parse_pipeline(spec(unique))
    await admin.ensure_topics(kafka, all_topics(pipe))
    topic = topics.stage_input(unique, "src")
    now = time.time_ns()
    prod = kclient.producer(kafka)
    await prod.start()
    try:
        await asyncio.gather(*[await kclient.send(
            prod, topic, "InferenceRequest",
            {"request_id": f"r{i}", "pipeline": unique, "created_ns": now, "deadline_ns": now + 10**9,
             "accuracy_floor": None, "content_type": "application/octet-stream", "payload": b""},
            key=f"r{i}", timestamp_ns=now) for i in range(30)])
    finally:
        await prod.stop()
    sample = np.cumsum(np.random.default_rng(0).exponential(1 / 20, 2000))
    plan = TunerPlan.from_sample(sample, doubling_windows(0.05), (StageSizing("src", 1, 25.0, 1.0),))
    port, stop = free_port(), asyncio.Event()
    tuner = asyncio.create_task(run_tuner(pipe, plan, TunerConfig(), DryRunActuator(), dry_run=True, settings=kafka,
                                          interval_s=0.2, lookback_s=0.0, stop=stop,
                                          metrics_addr=MetricsAddr("127.0.0.1", port), lag_interval_s=0.2))
    try:
        await until_lag(port, unique, 30.0)  # no worker ever ran: all 30 records are lag
        # the stage's group commits 12 of them (as a worker would): the tuner sees 18 left
        cons = kclient.consumer(kafka, group_id=topics.consumer_group(unique, "src"), enable_auto_commit=False)
        await cons.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(2)]
            cons.assign(tps)
            ends = await cons.end_offsets(tps)
            first = tps[0] if ends[tps[0]] >= 12 else tps[1]
            await cons.commit({first: OffsetAndMetadata(12, "")})
        finally:
            await cons.stop()
        await until_lag(port, unique, 18.0)
    finally:
        stop.set()
        await asyncio.wait_for(tuner, 30)
