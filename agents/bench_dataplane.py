"""Data-plane benchmark (`slipstream bench dataplane`), against the real broker, in one run:

1. added latency per hop of a 3-stage no-op pipeline (stage workers) against a plain aiokafka
   consume -> produce relay chain of the same length (``agents.bench_relay``), p50/p99, same open-loop
   request stream (Poisson, fixed seed);
2. msgs/s of one no-op stage worker against one relay, draining the same backlog;
3. the executor's throughput against onnxruntime called directly (``agents.bench_executor``).

The no-op stages run with max batch 8 and a 0 ms batch timeout, so what is measured is the agent's
own overhead: decode, queue, batch decision, hop record, encode, produce, delivery, ack.
"""
from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from streams import admin, codec, kafka as kclient, topics
from streams.client import make_request
from streams.config import KafkaSettings
from streams.procs import ReadyProcess, worker_argv
from streams.spec import load_pipeline
from streams.topics import TopicSpec

import re

RELAY_READY = re.compile(r"relay ready")


def noop_pipeline(name: str, stages: int, folder: Path, partitions: int = 1) -> Path:
    doc = {
        "name": name, "slo_ms": 60000,
        "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
        "stages": [{"name": f"s{i}", "variants": [{"name": "noop", "model": "noop", "accuracy": 1.0}],
                    "defaults": {"max_batch": 8, "batch_timeout_ms": 0, "partitions": partitions}}
                   for i in range(stages)],
        "edges": [{"from": f"s{i}", "to": f"s{i + 1}"} for i in range(stages - 1)],
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@dataclass(frozen=True)
class LatencyFigures:
    p50_ms: float
    p99_ms: float
    n: int


async def _open_loop(settings: KafkaSettings, pipe, src_topic: str, out_topic: str, n: int,
                     rate_qps: float, seed: int, record: str) -> LatencyFigures:
    """Send n requests at Poisson times to src_topic; latency = receipt on out_topic - creation."""
    rng = np.random.default_rng(seed)
    offsets = np.cumsum(rng.exponential(1.0 / rate_qps, n))
    cons = kclient.consumer(settings, out_topic, group_id=None, auto_offset_reset="latest")
    await cons.start()
    await cons.getmany(timeout_ms=500)  # join the topic's end before sending
    prod = kclient.producer(settings)
    await prod.start()
    created: dict[str, int] = {}
    latencies: list[float] = []

    async def receive() -> None:
        while len(latencies) < n:
            batch = await cons.getmany(timeout_ms=200)
            now = time.time_ns()
            for ms in batch.values():
                for m in ms:
                    rid = codec.decode(record, m.value)["request_id"]
                    if rid in created:
                        latencies.append((now - created.pop(rid)) / 1e6)

    reader = asyncio.create_task(receive())
    t0 = time.monotonic()
    futs = []
    for i in range(n):
        delay = t0 + offsets[i] - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)  # open-loop schedule: the send time is the point
        req = make_request(pipe, b"x" * 64)
        created[req["request_id"]] = req["created_ns"]
        futs.append(await kclient.send(prod, src_topic, "InferenceRequest", req, key=req["request_id"],
                                       timestamp_ns=req["created_ns"]))
    await asyncio.gather(*futs)
    await asyncio.wait_for(reader, 120)
    await prod.stop()
    await cons.stop()
    a = np.array(latencies)
    return LatencyFigures(float(np.percentile(a, 50)), float(np.percentile(a, 99)), len(a))


async def _fill(settings: KafkaSettings, pipe, topic: str, n: int) -> None:
    prod = kclient.producer(settings, linger_ms=20)
    await prod.start()
    futs = []
    for _ in range(n):
        req = make_request(pipe, b"x" * 64)
        futs.append(await kclient.send(prod, topic, "InferenceRequest", req, key=req["request_id"]))
    await asyncio.gather(*futs)
    await prod.stop()


async def _count_until(settings: KafkaSettings, topic: str, n: int, timeout_s: float = 300) -> None:
    cons = kclient.consumer(settings, topic, group_id=None)
    await cons.start()
    seen = 0
    try:
        async with asyncio.timeout(timeout_s):
            while seen < n:
                batch = await cons.getmany(timeout_ms=200)
                seen += sum(len(ms) for ms in batch.values())
    finally:
        await cons.stop()


def _throughput(settings: KafkaSettings, pipe, src: str, dst: str, n: int, proc_factory) -> float:
    """Fill src with n records, start the consumer process, time until n records are on dst."""
    asyncio.run(_fill(settings, pipe, src, n))
    p = proc_factory()
    try:
        p.wait_ready()
        t0 = time.monotonic()
        asyncio.run(_count_until(settings, dst, n))
        return n / (time.monotonic() - t0)
    finally:
        p.stop()


def run(settings: KafkaSettings, n_latency: int = 400, rate_qps: float = 100.0, n_throughput: int = 5000,
        repeats: int = 3, seed: int = 7, progress=print) -> dict:
    env = {"SLIPSTREAM_BOOTSTRAP": settings.bootstrap}
    out: dict = {"latency": {}, "throughput": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tag = uuid.uuid4().hex[:6]
        # --- 1. latency per hop, 3 hops
        path = noop_pipeline(f"bench-{tag}", 3, Path(tmp))
        pipe = load_pipeline(path)
        asyncio.run(admin.ensure_topics(settings, topics.all_topics(pipe)))
        relay_topics = [f"bench-{tag}-relay{i}" for i in range(4)]
        asyncio.run(admin.ensure_topics(settings, [TopicSpec(t, 1) for t in relay_topics]))
        progress("starting 3 stage workers and 3 relays")
        workers = [ReadyProcess(worker_argv(path, f"s{i}", "warn"), env=env, name=f"s{i}") for i in range(3)]
        relays = [ReadyProcess([sys.executable, "-m", "agents.bench_relay", relay_topics[i],
                                relay_topics[i + 1], f"relay-{tag}-{i}"], RELAY_READY, env, f"relay{i}")
                  for i in range(3)]
        try:
            for p in workers + relays:
                p.wait_ready()
            res_w, res_r = [], []
            for r in range(repeats):
                progress(f"latency round {r + 1}/{repeats}: {n_latency} requests at {rate_qps:g}/s")
                res_w.append(asyncio.run(_open_loop(settings, pipe, topics.stage_input(pipe.name, "s0"),
                                                    topics.results(pipe.name), n_latency, rate_qps,
                                                    seed + r, "InferenceResult")))
                res_r.append(asyncio.run(_open_loop(settings, pipe, relay_topics[0], relay_topics[3],
                                                    n_latency, rate_qps, seed + r, "InferenceRequest")))
        finally:
            for p in workers + relays:
                p.stop()
        med = lambda xs: statistics.median(xs)  # noqa: E731
        out["latency"] = {
            "stage_p50_ms_per_hop": med([x.p50_ms for x in res_w]) / 3,
            "stage_p99_ms_per_hop": med([x.p99_ms for x in res_w]) / 3,
            "relay_p50_ms_per_hop": med([x.p50_ms for x in res_r]) / 3,
            "relay_p99_ms_per_hop": med([x.p99_ms for x in res_r]) / 3,
        }
        # --- 2. throughput of one stage vs one relay, draining a backlog
        tput_w, tput_r = [], []
        for r in range(repeats):
            path1 = noop_pipeline(f"tput-{tag}-{r}", 1, Path(tmp))
            p1 = load_pipeline(path1)
            asyncio.run(admin.ensure_topics(settings, topics.all_topics(p1)))
            progress(f"throughput round {r + 1}/{repeats}: {n_throughput} records")
            tput_w.append(_throughput(settings, p1, topics.stage_input(p1.name, "s0"), topics.results(p1.name),
                                      n_throughput, lambda: ReadyProcess(worker_argv(path1, "s0", "warn"),
                                                                         env=env, name="s0")))
            src, dst = f"tput-{tag}-{r}-a", f"tput-{tag}-{r}-b"
            asyncio.run(admin.ensure_topics(settings, [TopicSpec(src, 1), TopicSpec(dst, 1)]))
            tput_r.append(_throughput(settings, p1, src, dst, n_throughput, lambda: ReadyProcess(
                [sys.executable, "-m", "agents.bench_relay", src, dst, f"relay-t-{tag}-{r}"],
                RELAY_READY, env, "relay")))
        out["throughput"] = {"stage_msgs_per_s": statistics.median(tput_w),
                             "relay_msgs_per_s": statistics.median(tput_r)}
    return out


def format_report(fig: dict) -> str:
    lat, tp = fig["latency"], fig["throughput"]
    rows = [
        ("added latency per hop, p50 (ms)", lat["stage_p50_ms_per_hop"], lat["relay_p50_ms_per_hop"]),
        ("added latency per hop, p99 (ms)", lat["stage_p99_ms_per_hop"], lat["relay_p99_ms_per_hop"]),
        ("one stage worker, msgs/s", tp["stage_msgs_per_s"], tp["relay_msgs_per_s"]),
    ]
    lines = [f"{'figure':34} {'slipstream':>11} {'aiokafka relay':>15} {'ratio':>7}"]
    for name, a, b in rows:
        lines.append(f"{name:34} {a:11.2f} {b:15.2f} {a / b:7.2f}")
    return "\n".join(lines)
