"""The tuner on the real broker with real worker processes: a step from a low to a high rate adds
replicas (inside the stage's worker) to the bottleneck stage within seconds, nothing
is lost or answered twice, and the replicas come back down after the quiet period (horizons shortened
so the test takes about a minute)."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np
import yaml

from slipstream.streams import admin, topics
from slipstream.streams.client import PipelineClient, make_request
from slipstream.streams.procs import worker_argv
from slipstream.streams.spec import load_pipeline
from slipstream.tuner.actuators import LocalProcessActuator
from slipstream.tuner.envelope import doubling_windows
from slipstream.tuner.policy import StageSizing, TunerConfig, TunerPlan
from slipstream.tuner.run import run_tuner

from .helpers import assert_exactly_once


def step_pipeline(name: str, folder: Path) -> Path:
    doc = {"name": name, "slo_ms": 20000,
           "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
           "stages": [
               {"name": "pre", "variants": [{"name": "pass", "model": "noop", "accuracy": 1.0}],
                "defaults": {"max_batch": 8, "batch_timeout_ms": 1, "partitions": 4}},
               {"name": "slow", "variants": [{"name": "mlp", "model": "synthetic", "accuracy": 0.8,
                                              "params": {"width": 64, "depth": 1, "seed": 1}}],
                "defaults": {"max_batch": 4, "batch_timeout_ms": 2, "partitions": 4}}],
           "edges": [{"from": "pre", "to": "slow"}]}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


async def test_rate_step_scales_bottleneck_up_fast_and_down_after_quiet(kafka, unique, tmp_path):
    path = step_pipeline(unique, tmp_path)
    pipe = load_pipeline(path)
    await admin.ensure_topics(kafka, topics.all_topics(pipe))
    # planned: 5 qps, one replica each (mu is what the plan assumed per replica)
    rng = np.random.default_rng(1)
    sample = np.cumsum(rng.exponential(1 / 5, 600))
    plan = TunerPlan.from_sample(sample, doubling_windows(0.1, 8.0),
                                 (StageSizing("pre", 1, 200.0, 1.0), StageSizing("slow", 1, 6.0, 1.0)))
    config = TunerConfig(activation_s=2.0, down_window_s=2.0, down_horizon_s=6.0, max_replicas=3)
    actuator = LocalProcessActuator(lambda stage: worker_argv(path, stage, "warn", config.max_replicas),
                                    env={"SLIPSTREAM_BOOTSTRAP": kafka.bootstrap}, log_dir=tmp_path,
                                    replicas_per_worker=config.max_replicas)
    decisions: list[tuple[float, str, int, int]] = []
    stop = asyncio.Event()
    scaled_down = asyncio.Event()

    def on_decision(d) -> None:
        if d.changes:
            decisions.extend((time.monotonic(), c.stage, c.previous, c.replicas) for c in d.changes)
            if any(c.stage == "slow" and c.replicas < c.previous for c in d.changes):
                scaled_down.set()

    actuator.set_replicas("pre", 1)
    actuator.set_replicas("slow", 1)
    tuner = asyncio.create_task(run_tuner(pipe, plan, config, actuator, dry_run=False, settings=kafka,
                                          interval_s=0.25, lookback_s=0.0, stop=stop, metrics_addr=None,
                                          on_decision=on_decision, replicas_per_worker=config.max_replicas))
    try:
        async with PipelineClient(pipe, kafka) as client:
            ids = []
            t0 = time.monotonic()
            # 5 qps for 4 s (the plan), then 40 qps for 6 s
            schedule = [i / 5 for i in range(20)] + [4 + i / 40 for i in range(240)]
            step_at = t0 + 4
            futs = []
            for at in schedule:
                delay = t0 + at - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)  # open-loop send schedule
                req = make_request(pipe, b"x" * 32)
                ids.append(req.request_id)
                futs.append(await client.send(req, wait=False))
            await asyncio.gather(*futs)
            results = {rid: await client.result(rid, 90) for rid in ids}
            # replicas inside one worker: no rebalance, so nothing is redelivered
            assert client.duplicates == 0
            assert len(actuator.pids("slow")) == 1
            ups = [t for t, stage, before, after in decisions if stage == "slow" and after > before]
            assert ups, f"no scale-up of the bottleneck stage: {decisions}"
            assert ups[0] - step_at < 5.0, f"scale-up came {ups[0] - step_at:.1f} s after the step"
            # quiet: wait for the scale-down decision (an event from the tuner), bounded in time
            await asyncio.wait_for(scaled_down.wait(), 60)
            downs = [t for t, stage, before, after in decisions if stage == "slow" and after < before]
            assert downs, f"no scale-down: {decisions}"
            assert downs[0] - ups[-1] >= config.quiet_factor * config.activation_s, decisions
            assert actuator.replicas("slow") < max(after for _, st, _, after in decisions if st == "slow")
    finally:
        stop.set()
        await asyncio.wait_for(tuner, 30)
        await asyncio.to_thread(actuator.close)
    # nothing lost: every request ended on the results topic, exactly once, none in error
    assert set(results) == set(ids)
    await assert_exactly_once(kafka, pipe.name, ids)
    assert all(r.status in ("done", "dropped") for r in results.values())
    assert sum(r.status == "done" for r in results.values()) >= 0.9 * len(ids)
