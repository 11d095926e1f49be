"""loadgen replay against the real broker: open-loop sends at the schedule's times, every result
collected once, lag and cost accounted (a noop relay stage, so the test measures the plumbing)."""
from __future__ import annotations

import asyncio
import subprocess
import sys

import numpy as np
import pytest
import yaml

from slipstream.loadgen.replay import ReplayOptions, ReplayTarget, replay, summarize_outcome
from slipstream.loadgen.schedule import build_schedule
from slipstream.loadgen.traces import load_trace
from slipstream.streams import admin, kafka as kclient, topics
from slipstream.streams.spec import load_pipeline

from .helpers import assert_exactly_once
from .workers import Workers, start_gateway

pytestmark = pytest.mark.broker

RELAY = {
    "slo_ms": 2000,
    "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
    "stages": [{"name": "relay", "variants": [{"name": "noop", "model": "noop", "accuracy": 1.0}],
                "defaults": {"variant": "noop", "hardware": "cpu-1", "max_batch": 8,
                             "batch_timeout_ms": 2, "replicas": 1, "partitions": 2}}],
}


@pytest.fixture
def relay(kafka, unique, tmp_path):
    path = tmp_path / f"{unique}.yaml"
    path.write_text(yaml.safe_dump({"name": unique, **RELAY}))
    pipe = load_pipeline(path)
    asyncio.run(admin.ensure_topics(kafka, topics.all_topics(pipe)))
    workers = Workers(path, kafka.bootstrap)
    try:
        workers.start("relay")
        yield pipe
    finally:
        workers.stop()


@pytest.mark.timeout(120)
async def test_replay_collects_every_request_once_with_lag_and_cost(kafka, relay):
    pipe = relay
    # a published plan on the control topic: 3 replicas at $0.05 = $0.15/h for the stage
    prod = kclient.producer(kafka)
    await prod.start()
    try:
        cfg = {"pipeline": pipe.name, "stage": "relay", "variant": "noop", "hardware": "cpu-1",
               "max_batch": 8, "batch_timeout_ms": 2.0, "replicas": 3, "partitions": 2, "epoch": 1,
               "planner_mode": "test", "predicted_p99_ms": None, "routing": {}, "cost_per_hour": 0.15,
               "reason": "test"}
        await (await kclient.send(prod, topics.control(pipe.name), "StageConfig", cfg, key="relay"))
    finally:
        await prod.stop()
    schedule = build_schedule(load_trace("gamma:rate=30,cv2=4,duration=4", seed=5), seed=5, rate_scale=1.0)
    target = ReplayTarget(pipe.name, pipe.source, pipe.slo_ms, pipe.input_content_type)
    out = await replay(schedule, target, kafka, b"payload",
                       ReplayOptions(run_id="itest", drain_s=30.0))
    c = out.collector
    assert len(c.sent) == len(schedule) and c.complete and c.missing() == []
    assert (c.duplicates, c.conflicting_duplicates) == (0, 0)
    await assert_exactly_once(kafka, pipe.name, c.sent)  # the results topic itself, read back
    assert all(r.status == "done" for r in c.collected())
    # open loop: actual sends follow the schedule (not one result at a time)
    lag_ms = (out.actual_ns - out.scheduled_ns) / 1e6
    assert np.median(lag_ms) < 50
    assert out.sender_realtime is may_run_realtime()  # its own process, at SCHED_RR where allowed
    s = summarize_outcome(out, slo_ms=pipe.slo_ms, pipeline=pipe.name, prices={"cpu-1": 0.05})
    assert s.done == len(schedule) and s.attainment == 1.0 and s.lag.sent == len(schedule)
    assert s.stages[0].stage == "relay" and s.stages[0].service.count == len(schedule)
    assert s.cost_mean_per_hour == pytest.approx(0.15, rel=1e-6)


@pytest.mark.timeout(120)
async def test_replay_through_a_gateway_takes_each_answer_as_the_result(kafka, relay, tmp_path):
    """The sender process relays each HTTP answer; every request gets exactly one result, done."""
    pipe = relay
    gateway, url = start_gateway(tmp_path / f"{pipe.name}.yaml", kafka.bootstrap)
    try:
        schedule = build_schedule(load_trace("poisson:rate=20,duration=3", seed=3), seed=3)
        target = ReplayTarget(pipe.name, pipe.source, pipe.slo_ms, pipe.input_content_type, gateway_url=url)
        out = await replay(schedule, target, kafka, b"payload", ReplayOptions(run_id="gw", drain_s=30.0))
    finally:
        gateway.stop()
    c = out.collector
    assert len(schedule) > 20 and len(c.sent) == len(schedule) and c.complete, c.missing()[:5]
    assert (c.duplicates, out.delivery_errors) == (0, 0)
    assert [r.status for r in c.collected()] == ["done"] * len(schedule)
    assert np.all(out.actual_ns >= out.scheduled_ns)


def may_run_realtime() -> bool:
    """Whether this host lets a process take SCHED_RR (asked in a throwaway process)."""
    code = "import os; os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(1))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0
