"""`slipstream bench scaling`: what a scale event costs the replicas already serving, on the real broker.

One round: a one-stage pipeline (a synthetic MLP, two variants) under steady open-loop Poisson load
is taken through the replica steps 1 -> 2 -> 4 -> 2 -> 1 and a variant switch, ``step_s`` apart, by
publishing StageConfigs and resizing through :class:`~slipstream.tuner.actuators.LocalProcessActuator`, as the
tuner does. Two deployments are measured in the same run, in alternating rounds:

- ``in-worker`` (Slipstream's): replicas inside one worker (``replicas_per_worker``);
- ``processes`` (the baseline it replaces): one worker process per replica, so every replica change
  is a consumer-group rebalance.

Per event, ``slipstream.loadgen.bench.scaling_stats`` reads the results and the workers' timeline marks.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np
import yaml

from ...streams import admin, topics
from ...streams.client import PipelineClient, make_request
from ...streams.config import BOOTSTRAP_ENV, KafkaSettings
from ...streams.control_io import KafkaPublisher
from ...streams.procs import worker_argv
from ...streams.spec import load_pipeline
from ...streams.timeline import parse
from ...tuner.actuators import LocalProcessActuator
from ...tuner.service import stage_config_record
from .scaling_stats import EventCost, Mark, Served, event_cost

STAGE = "model"
MODES = {"in-worker": 4, "processes": 1}  # mode -> replicas one worker may hold


@dataclass(frozen=True)
class Step:
    replicas: int
    variant: str = "mlp-a"

    def label(self, before: "Step") -> str:
        if self.variant != before.variant:
            return f"variant {before.variant} -> {self.variant}"
        return f"{before.replicas} -> {self.replicas}"


STEPS = (Step(1), Step(2), Step(4), Step(2), Step(1), Step(1, "mlp-b"))


def bench_pipeline(name: str, folder: Path, width: int) -> Path:
    variants = [{"name": n, "model": "synthetic", "accuracy": a, "params": {"width": w, "depth": 4, "seed": 1}}
                for n, a, w in (("mlp-a", 0.8, width), ("mlp-b", 0.82, width + width // 4))]
    doc = {"name": name, "slo_ms": 5000,
           "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
           "stages": [{"name": STAGE, "variants": variants,
                       "defaults": {"variant": "mlp-a", "max_batch": 4, "batch_timeout_ms": 2,
                                    "partitions": 4}}],
           "edges": []}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


async def run_round(mode: str, kafka: KafkaSettings, folder: Path, *, rate_qps: float, step_s: float,
                    width: int, seed: int, progress: Callable[[str], None]) -> list[EventCost]:
    name = f"bench-scaling-{mode}-{seed}-{int(time.time())}"
    path = bench_pipeline(name, folder, width)
    pipe = load_pipeline(path)
    await admin.ensure_topics(kafka, topics.all_topics(pipe))
    cap = MODES[mode]
    logs = folder / name
    actuator = LocalProcessActuator(lambda stage: worker_argv(path, stage, "warn", cap), log_dir=logs,
                                    env={BOOTSTRAP_ENV: kafka.bootstrap}, replicas_per_worker=cap)
    publisher = KafkaPublisher(kafka, pipe.name)
    await publisher.start()
    config = None
    events: list[tuple[str, int]] = []

    async def apply(step: Step) -> None:
        nonlocal config
        config = replace(stage_config_record(pipe, config, STAGE, step.replicas, 4, "bench scaling"),
                         variant=step.variant)
        await publisher.publish(topics.control(pipe.name), "StageConfig", config, STAGE)
        await asyncio.to_thread(actuator.set_replicas, STAGE, step.replicas)

    try:
        await apply(STEPS[0])
        await _wait_ready(logs, 120)
        rng = np.random.default_rng(seed)
        arrivals = np.cumsum(rng.exponential(1 / rate_qps, int(rate_qps * step_s * len(STEPS))))
        async with PipelineClient(pipe, kafka) as client:
            t0, sent, futs, k = time.time(), [], [], 1
            for at in arrivals:
                if k < len(STEPS) and at >= k * step_s:
                    events.append((STEPS[k].label(STEPS[k - 1]), time.time_ns()))
                    asyncio.ensure_future(apply(STEPS[k]))  # resizing must not hold up the load
                    progress(f"  {mode}: {events[-1][0]}")
                    k += 1
                delay = t0 + at - time.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                req = make_request(pipe, rng.bytes(64))
                sent.append(req.request_id)
                futs.append(await client.send(req, wait=False))
            await asyncio.gather(*futs)
            results = [await client.result(rid, 120) for rid in sent]
            if client.duplicates:
                progress(f"  {mode}: {client.duplicates} duplicate results")
    finally:
        await publisher.stop()
        await asyncio.to_thread(actuator.close)
    served = [Served(r.created_ns, r.hops[0].enqueued_ns, r.hops[0].started_ns, r.hops[0].worker,
                     r.hops[0].variant) for r in results if r.hops]
    marks = read_marks(logs)
    return [event_cost(label, at, served, marks, span_s=step_s, before_s=step_s / 3) for label, at in events]


async def _wait_ready(logs: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:  # child-process logs: polled, there is no event to wait on
        if any(m.event == "model-loaded" for m in read_marks(logs)) and \
                any("slipstream-worker ready" in p.read_text(errors="replace") for p in logs.glob("*.log")):
            return
        await asyncio.sleep(0.2)
    raise TimeoutError(f"bench worker not ready within {timeout_s:.0f} s; see {logs}")


def read_marks(logs: Path) -> list[Mark]:
    out = []
    for p in sorted(logs.glob("*.log")):
        for line in p.read_text(errors="replace").splitlines():
            m = parse(line)
            if m is not None:
                out.append(Mark(p.stem, *m))
    return out


def run(kafka: KafkaSettings, folder: Path, *, rounds: int, rate_qps: float, step_s: float, width: int,
        modes: tuple[str, ...], progress: Callable[[str], None]) -> dict[str, list[list[EventCost]]]:
    """Alternating rounds of each mode; returns mode -> rounds -> events."""
    out: dict[str, list[list[EventCost]]] = {m: [] for m in modes}
    for r in range(rounds):
        for mode in modes:
            progress(f"round {r + 1}/{rounds}: {mode}")
            out[mode].append(asyncio.run(run_round(mode, kafka, folder, rate_qps=rate_qps, step_s=step_s,
                                                   width=width, seed=r, progress=progress)))
    return out
