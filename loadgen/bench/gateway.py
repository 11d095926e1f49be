"""`slipstream bench gateway`: what the gateway adds, against the real broker, in one run.

1. End-to-end latency through the gateway (aiohttp client -> HTTP -> gateway -> Kafka -> no-op worker
   -> results topic -> gateway -> HTTP answer) against the Python Kafka client (``PipelineClient``:
   produce, then read the result from the results topic) on the same one-stage no-op pipeline, the
   same worker, the same open-loop request rate per path; within each round the two paths alternate
   request by request (so a burst of other load on the machine hits both alike), or with
   ``interleave=False`` run one after the other. p50 and p99 per round, medians over rounds, and the
   ratio gateway / Kafka client (goal <= 1.2).
2. Requests/s one gateway process sustains: closed loop, ``concurrency`` HTTP requests outstanding,
   for ``seconds``; only 200 answers count (429s and others are reported beside).

Client, gateway, worker and broker share the machine.
"""
from __future__ import annotations

import asyncio
import itertools
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
import numpy as np
import yaml

from ...streams import admin, topics
from ...streams.client import PipelineClient, make_request
from ...streams.config import BOOTSTRAP_ENV, KafkaSettings
from ...streams.procs import ReadyProcess, worker_argv
from ...streams.spec import load_pipeline

from ...gateway.server import READY

BODY = {"inputs": [{"name": "input", "shape": [1], "datatype": "BYTES", "data": ["x" * 64]}]}


def noop_pipeline(name: str, folder: Path, slo_ms: float) -> Path:
    doc = {"name": name, "slo_ms": slo_ms, "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
           "stages": [{"name": "relay", "variants": [{"name": "noop", "model": "noop", "accuracy": 1.0,
                                                      "params": {"content_type": "text/plain"}}],
                       "defaults": {"max_batch": 8, "batch_timeout_ms": 0, "partitions": 2}}], "edges": []}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


async def _paced(n: int, rate: float, one) -> list[float]:
    """``n`` calls of ``one()`` (each returns its latency in ms) started at ``rate``/s, open loop."""
    tasks = []
    for _ in range(n):
        tasks.append(asyncio.create_task(one()))
        await asyncio.sleep(1 / rate)
    return list(await asyncio.gather(*tasks))


def kafka_call(client: PipelineClient, pipe):
    async def one() -> float:
        t0 = time.perf_counter()
        req = make_request(pipe, b"x" * 64)
        await client.send(req)
        res = await client.result(req.request_id, 30)
        client.forget(req.request_id)
        assert res.status == "done", res
        return (time.perf_counter() - t0) * 1000

    return one


def http_call(http: aiohttp.ClientSession, url: str):
    async def one() -> float:
        t0 = time.perf_counter()
        async with http.post(url, json=BODY) as r:
            await r.read()
            assert r.status == 200, r.status
        return (time.perf_counter() - t0) * 1000

    return one


async def kafka_round(client: PipelineClient, pipe, n: int, rate: float) -> list[float]:
    return await _paced(n, rate, kafka_call(client, pipe))


async def http_round(http: aiohttp.ClientSession, url: str, n: int, rate: float) -> list[float]:
    return await _paced(n, rate, http_call(http, url))


async def interleaved_round(kafka_one, http_one, n: int, rate: float) -> tuple[list[float], list[float]]:
    """``n`` requests per path, the paths alternating request by request in one open-loop stream at
    ``rate``/s per path: whatever else loads the machine meanwhile loads both paths alike."""
    lat = await _paced(2 * n, 2 * rate, _alternate(kafka_one, http_one))
    return lat[0::2], lat[1::2]


def _alternate(*calls):
    turn = itertools.count()

    def one():
        return calls[next(turn) % len(calls)]()

    return one


async def throughput(http: aiohttp.ClientSession, url: str, concurrency: int, seconds: float) -> dict:
    codes: dict[int, int] = {}
    end = time.perf_counter() + seconds

    async def loop() -> None:
        while time.perf_counter() < end:
            async with http.post(url, json=BODY) as r:
                await r.read()
                codes[r.status] = codes.get(r.status, 0) + 1

    t0 = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(concurrency)))
    took = time.perf_counter() - t0
    return {"ok_per_s": codes.get(200, 0) / took, "codes": codes, "seconds": took, "concurrency": concurrency}


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


async def measure(kafka: KafkaSettings, pipe, url: str, n: int, rate: float, repeats: int, concurrency: int,
                  seconds: float, progress, client_linger_ms: int | None = None, interleave: bool = True) -> dict:
    runs: dict[str, list[float]] = {k: [] for k in ("kafka_p50", "kafka_p99", "gateway_p50", "gateway_p99")}
    infer = f"{url}/v2/models/{pipe.name}/infer"
    conn = aiohttp.TCPConnector(limit=max(concurrency, 100))
    async with PipelineClient(pipe, kafka, linger_ms=client_linger_ms) as client, aiohttp.ClientSession(connector=conn) as http:
        await kafka_round(client, pipe, 20, rate)  # warm both paths (connections, metadata)
        await http_round(http, infer, 20, rate)
        for i in range(repeats):
            if interleave:
                by_path = zip(("kafka", "gateway"), await interleaved_round(kafka_call(client, pipe),
                                                                           http_call(http, infer), n, rate))
            else:
                by_path = (("kafka", await kafka_round(client, pipe, n, rate)),
                           ("gateway", await http_round(http, infer, n, rate)))
            for path, lat in by_path:
                runs[f"{path}_p50"].append(pct(lat, 50))
                runs[f"{path}_p99"].append(pct(lat, 99))
            progress(f"round {i + 1}: " + ", ".join(f"{k} {v[-1]:.2f} ms" for k, v in runs.items()))
        tp = await throughput(http, infer, concurrency, seconds)
    med = {k: statistics.median(v) for k, v in runs.items()}
    return {"requests_per_round": n, "rate": rate, "runs": runs, "medians": med,
            "ratio_p50": med["gateway_p50"] / med["kafka_p50"], "ratio_p99": med["gateway_p99"] / med["kafka_p99"],
            "throughput": tp, "client_linger_ms": client_linger_ms, "interleave": interleave}


def run(kafka: KafkaSettings, n: int = 400, rate: float = 100.0, repeats: int = 3, concurrency: int = 64,
        seconds: float = 10.0, progress=lambda m: None, client_linger_ms: int | None = None,
        interleave: bool = True) -> dict:
    """``client_linger_ms``: the Kafka client's producer linger (None: the client's default, 1 ms; the
    gateway produces with 0). ``interleave``: the two paths alternate request by request within each
    round (default), else each round runs one path, then the other (what the first figures used)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = noop_pipeline(f"bench-gw-{uuid.uuid4().hex[:8]}", Path(tmp), slo_ms=10_000)
        pipe = load_pipeline(path)
        asyncio.run(admin.ensure_topics(kafka, topics.all_topics(pipe)))
        env = {BOOTSTRAP_ENV: kafka.bootstrap}
        worker = ReadyProcess(worker_argv(str(path), "relay", loglevel="warn"), env=env, name="worker relay")
        gw = ReadyProcess([sys.executable, "-m", "slipstream.cli", "gateway", "--pipeline", str(path),
                           "--addr", "127.0.0.1:0"], ready=READY, env=env, name="gateway")
        try:
            worker.wait_ready(120)
            gw.wait_ready(60)
            addr = next(m.group(1) for m in map(READY.search, list(gw.lines)) if m)
            progress(f"worker and gateway ready ({addr}); {repeats} rounds of {n} requests at {rate}/s per path")
            fig = asyncio.run(measure(kafka, pipe, f"http://{addr}", n, rate, repeats, concurrency, seconds, progress,
                                      client_linger_ms, interleave))
        finally:
            gw.stop()
            worker.stop()
    fig["commit"] = _commit()
    return fig


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, timeout=10).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def format_report(fig: dict) -> str:
    m, runs = fig["medians"], fig["runs"]
    linger = "default" if fig["client_linger_ms"] is None else f"{fig['client_linger_ms']} ms"
    lines = [f"commit {fig['commit']}; {fig['requests_per_round']} requests per round at {fig['rate']:.0f}/s, "
             f"{len(runs['kafka_p50'])} rounds per path, {'interleaved' if fig.get('interleave') else 'one path after the other'} "
             f"(Kafka client linger {linger}), medians:",
             f"{'end to end (ms)':18} {'Kafka client':>13} {'gateway':>9} {'ratio':>7} {'added':>8}"]
    for q in ("p50", "p99"):
        k, g = m[f"kafka_{q}"], m[f"gateway_{q}"]
        lines.append(f"{q:18} {k:13.2f} {g:9.2f} {g / k:7.2f} {g - k:8.2f}")
    lines.append("every round (Kafka client | gateway):")
    for q in ("p50", "p99"):
        lines.append(f"  {q}  " + " ".join(f"{v:7.2f}" for v in runs[f"kafka_{q}"]) + "  |  "
                     + " ".join(f"{v:7.2f}" for v in runs[f"gateway_{q}"]))
    tp = fig["throughput"]
    lines.append(f"one gateway process, closed loop, {tp['concurrency']} outstanding, {tp['seconds']:.1f} s: "
                 f"{tp['ok_per_s']:.0f} requests/s answered 200 (answers by code: {tp['codes']})")
    return "\n".join(lines)
