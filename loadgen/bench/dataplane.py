"""Data-plane benchmark (`slipstream bench dataplane`), against the real broker, in one run:

1. added latency per hop of a 3-stage no-op pipeline (stage workers) against a plain aiokafka
   consume -> produce relay chain of the same length (``slipstream.loadgen.bench.relay``), p50/p99, same open-loop
   request stream (Poisson, fixed seed). Measured per hop, not divided: a hop is from the moment the
   previous hop produced (the client's send for the first) to the moment this one produces, i.e. one
   Kafka transit plus the worker's time; stage workers report these in their ``HopTiming``s
   (``enqueued_ns`` -> ``finished_ns``), relays stamp their produce time in a header. The path has 4
   transits: the 4th, from the last hop to the client's consumer, is reported on its own
   (``delivery``), as is the end-to-end time;
2. msgs/s of one no-op stage worker against one relay, draining the same backlog;
3. the executor's throughput against onnxruntime called directly (``slipstream.loadgen.bench.executor``).

Stage workers run in both processing modes (``slipstream.streams.config``) in the same run, the rounds
interleaved: at-least-once (the ``stage`` figures) and exactly-once (``eos``: each window's outputs
and offsets in one transaction; its readers, the next stage and the client's consumer, read committed
only, so a hop's figure includes waiting for the previous hop's commit).

The no-op stages of the latency rounds run with max batch 8 and a 0 ms batch timeout, the throughput
rounds with max batch 64 (``THROUGHPUT_BATCH``, the batch a GPU stage runs), so what is measured is the
agent's own overhead: decode, queue, batch decision, hop record, encode, produce, delivery, ack.
"""
from __future__ import annotations

import asyncio
import re
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from ...streams import admin, codec, kafka as kclient, topics
from ...streams.client import make_request
from ...streams.config import AT_LEAST_ONCE, BOOTSTRAP_ENV, EXACTLY_ONCE, PROCESSING_ENV, KafkaSettings
from ...streams.procs import ReadyProcess, worker_argv
from ...streams.spec import load_pipeline
from ...streams.topics import TopicSpec
from .relay import RELAY_HEADER

RELAY_READY = re.compile(r"relay ready")
MODES = {"stage": AT_LEAST_ONCE, "eos": EXACTLY_ONCE}  # figure prefix -> SLIPSTREAM_PROCESSING
LATENCY_BATCH, THROUGHPUT_BATCH = 8, 64
# Records per throughput round. A round is timed from the ready line to the last record read back,
# so it includes fixed start-up costs (the counting consumer's start, the first fetch; the relay's
# group join until its ready line came after its assignment): at 5,000 records they were a fifth of a
# relay's round and raised the ratio (same run: 0.57 at 5,000, 0.50 at 30,000), so a round drains a
# backlog long enough to hide them.
BACKLOG = 30000


def noop_pipeline(name: str, stages: int, folder: Path, partitions: int = 1,
                  max_batch: int = LATENCY_BATCH) -> Path:
    doc = {
        "name": name, "slo_ms": 60000,
        "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
        "stages": [{"name": f"s{i}", "variants": [{"name": "noop", "model": "noop", "accuracy": 1.0}],
                    "defaults": {"max_batch": max_batch, "batch_timeout_ms": 0, "partitions": partitions}}
                   for i in range(stages)],
        "edges": [{"from": f"s{i}", "to": f"s{i + 1}"} for i in range(stages - 1)],
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@dataclass(frozen=True)
class LatencyFigures:
    hop_ms: np.ndarray  # every hop of every request: previous produce -> this produce
    delivery_ms: np.ndarray  # last produce -> receipt by the client's consumer
    e2e_ms: np.ndarray  # creation -> receipt

    @property
    def n(self) -> int:
        return len(self.e2e_ms)


def stage_hop_ends(msg) -> tuple[str, int, list[int]]:
    """(request id, created, each hop's produce time) of a result: its HopTimings' finishes."""
    res = codec.decode_typed("InferenceResult", msg.value)
    return res.request_id, res.created_ns, [h.finished_ns for h in res.hops]


def relay_hop_ends(msg) -> tuple[str, int, list[int]]:
    """The same for a request relayed by ``slipstream.loadgen.bench.relay``: the produce times in its headers."""
    req = codec.decode_typed("InferenceRequest", msg.value)
    ends = [int(v) for k, v in (msg.headers or ()) if k == RELAY_HEADER]
    return req.request_id, req.created_ns, ends


def split_hops(created_ns: int, ends: list[int], received_ns: int) -> tuple[list[int], int, int]:
    """(each hop's time, the delivery transit, end to end) in ns: hop k runs from the previous
    produce (the client's send for the first) to hop k's produce."""
    return np.diff([created_ns, *ends]).tolist(), received_ns - ends[-1], received_ns - created_ns


async def _open_loop(settings: KafkaSettings, pipe, src_topic: str, out_topic: str, n: int,
                     rate_qps: float, seed: int, hop_ends) -> LatencyFigures:
    """Send n requests at Poisson times to src_topic; per request read back from out_topic the hops'
    produce times (``hop_ends``) and the receipt time."""
    rng = np.random.default_rng(seed)
    offsets = np.cumsum(rng.exponential(1.0 / rate_qps, n))
    cons = kclient.consumer(settings, out_topic, group_id=None, auto_offset_reset="latest")
    await cons.start()
    await cons.getmany(timeout_ms=500)  # join the topic's end before sending
    prod = kclient.producer(settings)
    await prod.start()
    created: dict[str, int] = {}
    hops: list[int] = []
    delivery: list[int] = []
    e2e: list[int] = []

    async def receive() -> None:
        while len(e2e) < n:
            batch = await cons.getmany(timeout_ms=200)
            now = time.time_ns()
            for ms in batch.values():
                for m in ms:
                    rid, t0_ns, ends = hop_ends(m)
                    if created.pop(rid, None) is None:
                        continue
                    h, d, e = split_hops(t0_ns, ends, now)
                    hops.extend(h)
                    delivery.append(d)
                    e2e.append(e)

    reader = asyncio.create_task(receive())
    t0 = time.monotonic()
    futs = []
    for i in range(n):
        delay = t0 + offsets[i] - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)  # open-loop schedule: the send time is the point
        req = make_request(pipe, b"x" * 64)
        created[req.request_id] = req.created_ns
        futs.append(await kclient.send(prod, src_topic, "InferenceRequest", req, key=req.request_id,
                                       timestamp_ns=req.created_ns))
    await asyncio.gather(*futs)
    await asyncio.wait_for(reader, 120)
    await prod.stop()
    await cons.stop()
    ms = lambda xs: np.asarray(xs, dtype=float) / 1e6  # noqa: E731
    return LatencyFigures(ms(hops), ms(delivery), ms(e2e))


async def _fill(settings: KafkaSettings, pipe, topic: str, n: int) -> None:
    prod = kclient.producer(settings, linger_ms=20)
    await prod.start()
    futs = []
    for _ in range(n):
        req = make_request(pipe, b"x" * 64)
        futs.append(await kclient.send(prod, topic, "InferenceRequest", req, key=req.request_id))
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


def run(settings: KafkaSettings, n_latency: int = 400, rate_qps: float = 100.0, n_throughput: int = BACKLOG,
        repeats: int = 3, seed: int = 7, progress=print) -> dict:
    env = {BOOTSTRAP_ENV: settings.bootstrap}
    out: dict = {"latency": {}, "throughput": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tag = uuid.uuid4().hex[:6]
        # --- 1. latency per hop, 3 hops, stage workers in each processing mode and relays
        pipes = {who: load_pipeline(noop_pipeline(f"bench-{who}-{tag}", 3, Path(tmp))) for who in MODES}
        for pipe in pipes.values():
            asyncio.run(admin.ensure_topics(settings, topics.all_topics(pipe)))
        relay_topics = [f"bench-{tag}-relay{i}" for i in range(4)]
        asyncio.run(admin.ensure_topics(settings, [TopicSpec(t, 1) for t in relay_topics]))
        progress(f"starting 3 stage workers per processing mode ({', '.join(MODES.values())}) and 3 relays")
        workers = [ReadyProcess(worker_argv(Path(tmp) / f"{pipes[who].name}.yaml", f"s{i}", "warn"),
                                env={**env, PROCESSING_ENV: mode}, name=f"{who}-s{i}")
                   for who, mode in MODES.items() for i in range(3)]
        relays = [ReadyProcess([sys.executable, "-m", "slipstream.loadgen.bench.relay", relay_topics[i],
                                relay_topics[i + 1], f"relay-{tag}-{i}"], RELAY_READY, env, f"relay{i}")
                  for i in range(3)]
        try:
            for p in workers + relays:
                p.wait_ready()
            res: dict[str, list[LatencyFigures]] = {who: [] for who in [*MODES, "relay"]}
            for r in range(repeats):
                progress(f"latency round {r + 1}/{repeats}: {n_latency} requests at {rate_qps:g}/s")
                for who, pipe in pipes.items():
                    res[who].append(asyncio.run(_open_loop(
                        settings, pipe, topics.stage_input(pipe.name, "s0"), topics.results(pipe.name),
                        n_latency, rate_qps, seed + r, stage_hop_ends)))
                res["relay"].append(asyncio.run(_open_loop(settings, pipes["stage"], relay_topics[0],
                                                           relay_topics[3], n_latency, rate_qps, seed + r,
                                                           relay_hop_ends)))
        finally:
            for p in workers + relays:
                p.stop()
        runs = {f"{who}_{q}_ms_{what}": [float(np.percentile(getattr(x, f"{what}_ms"), int(q[1:])))
                                          for x in figs]
                for who, figs in res.items() for q in ("p50", "p99")
                for what in ("hop", "delivery", "e2e")}
        out["latency"] = {k: statistics.median(v) for k, v in runs.items()}
        out["runs"] = dict(runs)
        # --- 2. throughput of one stage vs one relay, draining a backlog
        tput: dict[str, list[float]] = {who: [] for who in MODES}
        tput_r = []
        for r in range(repeats):
            progress(f"throughput round {r + 1}/{repeats}: {n_throughput} records")
            for who, mode in MODES.items():
                path1 = noop_pipeline(f"tput-{who}-{tag}-{r}", 1, Path(tmp), max_batch=THROUGHPUT_BATCH)
                p1 = load_pipeline(path1)
                asyncio.run(admin.ensure_topics(settings, topics.all_topics(p1)))
                tput[who].append(_throughput(
                    settings, p1, topics.stage_input(p1.name, "s0"), topics.results(p1.name), n_throughput,
                    lambda: ReadyProcess(worker_argv(path1, "s0", "warn"),
                                         env={**env, PROCESSING_ENV: mode}, name="s0")))
            src, dst = f"tput-{tag}-{r}-a", f"tput-{tag}-{r}-b"
            asyncio.run(admin.ensure_topics(settings, [TopicSpec(src, 1), TopicSpec(dst, 1)]))
            tput_r.append(_throughput(settings, p1, src, dst, n_throughput, lambda: ReadyProcess(
                [sys.executable, "-m", "slipstream.loadgen.bench.relay", src, dst, f"relay-t-{tag}-{r}"],
                RELAY_READY, env, "relay")))
        out["throughput"] = {f"{who}_msgs_per_s": statistics.median(v) for who, v in tput.items()}
        out["throughput"]["relay_msgs_per_s"] = statistics.median(tput_r)
        out["runs"].update({f"{who}_msgs_per_s": v for who, v in tput.items()}, relay_msgs_per_s=tput_r)
    return out


def format_report(fig: dict) -> str:
    lat, tp = fig["latency"], fig["throughput"]
    what = {"hop": "latency per hop", "delivery": "last transit to client", "e2e": "end to end, 3 hops"}
    rows = [(f"{label}, {q} (ms)", lat[f"stage_{q}_ms_{k}"], lat[f"relay_{q}_ms_{k}"])
            for k, label in what.items() for q in ("p50", "p99")]
    rows.append((f"one stage worker, msgs/s (batch {THROUGHPUT_BATCH})", tp["stage_msgs_per_s"],
                 tp["relay_msgs_per_s"]))
    lines = [f"{'figure':38} {'slipstream':>11} {'aiokafka relay':>15} {'ratio':>7}"]
    for name, a, b in rows:
        lines.append(f"{name:38} {a:11.2f} {b:15.2f} {a / b:7.2f}")
    if "eos_p99_ms_hop" in lat:  # exactly-once against at-least-once, same run
        lines.append("exactly-once (one transaction per window and input partition) vs at-least-once:")
        lines.append(f"{'figure':38} {'at-least-once':>13} {'exactly-once':>13} {'ratio':>7}")
        eos = [(f"{label}, {q} (ms)", lat[f"stage_{q}_ms_{k}"], lat[f"eos_{q}_ms_{k}"])
               for k, label in what.items() for q in ("p50", "p99")]
        if "eos_msgs_per_s" in tp:
            eos.append((f"one stage worker, msgs/s (batch {THROUGHPUT_BATCH})", tp["stage_msgs_per_s"],
                        tp["eos_msgs_per_s"]))
        lines += [f"{name:38} {a:13.2f} {b:13.2f} {b / a:7.2f}" for name, a, b in eos]
    if "runs" in fig:  # every round, not only the medians
        lines.append("every round (at-least-once | exactly-once | relay):")
        for k in (k for k in fig["runs"] if k.startswith("stage_")):
            name = k[len("stage_"):]
            lines.append(f"  {name:22} " + " | ".join(" ".join(f"{v:9.2f}" for v in fig["runs"].get(f"{w}_{name}", []))
                                                      for w in ("stage", "eos", "relay")))
    return "\n".join(lines)


def profile(settings: KafkaSettings, out: str, n: int = 30000, max_batch: int = THROUGHPUT_BATCH,
            py_spy: str = "py-spy", rate_hz: int = 250) -> float:
    """Where a no-op worker's time goes while it drains a backlog of ``n`` records: py-spy (a
    sampling profiler, no instrumentation of the worker) attached to the ready worker for the drain,
    writing collapsed stacks (``py-spy record -f raw``) to ``out``. Returns the drain's msgs/s."""
    import signal
    import subprocess

    env = {BOOTSTRAP_ENV: settings.bootstrap}
    with tempfile.TemporaryDirectory() as tmp:
        path = noop_pipeline(f"prof-{uuid.uuid4().hex[:6]}", 1, Path(tmp), max_batch=max_batch)
        pipe = load_pipeline(path)
        asyncio.run(admin.ensure_topics(settings, topics.all_topics(pipe)))
        asyncio.run(_fill(settings, pipe, topics.stage_input(pipe.name, "s0"), n))
        worker = ReadyProcess(worker_argv(path, "s0", "warn"), env=env, name="s0")
        try:
            worker.wait_ready()
            spy = subprocess.Popen([py_spy, "record", "-r", str(rate_hz), "-f", "raw", "-o", out,
                                    "--pid", str(worker.proc.pid)])
            t0 = time.monotonic()
            asyncio.run(_count_until(settings, topics.results(pipe.name), n))
            rate = n / (time.monotonic() - t0)
            spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            spy.wait(60)
            return rate
        finally:
            worker.stop()


if __name__ == "__main__":  # python -m slipstream.loadgen.bench.dataplane profile OUT [N] [PY_SPY]
    if sys.argv[1:2] != ["profile"] or len(sys.argv) < 3:
        sys.exit("usage: python -m slipstream.loadgen.bench.dataplane profile OUT [N] [PY_SPY]")
    a = sys.argv[2:]
    r = profile(KafkaSettings.from_env(), a[0], int(a[1]) if len(a) > 1 else 30000,
                py_spy=a[2] if len(a) > 2 else "py-spy")
    print(f"drained at {r:.0f} msgs/s under py-spy; collapsed stacks in {a[0]}")
