"""Executor overhead benchmark: the executor's throughput against calling onnxruntime directly on
the same model, session and batch.

The executor's number includes everything a stage pays per batch besides Kafka: decoding each
payload (raw uint8 pixels by default, the cheapest format; ``payload="png"`` adds PNG decoding),
normalising, stacking, the onnxruntime call and the top-5 JSON per item. The baseline is
``session.run`` on an already-normalised float32 array, on the executor's own session, so the ratio
(executor / raw, <= 1) is the share of model throughput the executor keeps. Runs of the two are
interleaved so machine noise hits both alike; each figure is the median over ``runs``.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ...agents.executors import ModelExecutor
from ...agents.models.export import DEFAULT_CACHE_DIR, INPUT_NAME
from ...agents.preprocess import encode_png, synthetic_image
from ...agents.zoo import load_executor
from ...streams.spec import Hardware, Variant

MODEL = "efficientnet-lite0"


@dataclass(frozen=True)
class ExecutorBench:
    model: str
    batch: int
    threads: int
    payload: str
    executor_items_per_s: float
    raw_ort_items_per_s: float
    ratio: float  # executor / raw ort
    runs: int
    iterations: int  # batches per run
    device: str


def _items_per_s(fn: Callable[[], object], batch: int, iterations: int) -> float:
    start = time.perf_counter()
    for _ in range(iterations):
        fn()
    return batch * iterations / (time.perf_counter() - start)


def bench_executor(batches: Sequence[int] = (1, 8, 64), *, runs: int = 5, iterations: int = 10,
                   threads: int = 1, payload: str = "raw", model: str = MODEL,
                   cache_dir: str | Path = DEFAULT_CACHE_DIR) -> list[ExecutorBench]:
    """One row per batch size: median executor and raw-ort items/s over ``runs`` runs of
    ``iterations`` batches each, and their ratio."""
    if payload not in ("raw", "png"):
        raise ValueError(f"payload must be 'raw' or 'png', got {payload!r}")
    hw = Hardware(f"cpu-{threads}", "cpu", 0.0, threads)
    ex = load_executor(Variant(model, model, 0.0, {"backend": "onnx"}), hw, cache_dir=cache_dir)
    assert isinstance(ex, ModelExecutor)
    try:
        res = ex.codec.resolution
        pixels = [synthetic_image(res, seed=i) for i in range(max(batches))]
        payloads = ([p.tobytes() for p in pixels] if payload == "raw"
                    else [encode_png(p) for p in pixels])
        session = ex.backend.session
        rows = []
        for b in batches:
            items = payloads[:b]
            ready = ex.codec.collate([ex.codec.decode(p) for p in items])[INPUT_NAME]
            ex.run(items), session.run(None, {INPUT_NAME: ready})  # warm-up
            exe, raw = [], []
            for _ in range(runs):
                exe.append(_items_per_s(lambda: ex.run(items), b, iterations))
                raw.append(_items_per_s(lambda: session.run(None, {INPUT_NAME: ready}), b, iterations))
            e, r = statistics.median(exe), statistics.median(raw)
            rows.append(ExecutorBench(model, b, threads, payload, e, r, e / r, runs, iterations,
                                      ex.device))
        return rows
    finally:
        ex.close()


@dataclass(frozen=True)
class CheckBench:
    stage: str
    batch: int
    run_ms: float  # the executor's run alone (what a profile measures)
    check_then_run_ms: float  # check every payload, then run: each payload decoded twice
    agent_ms: float  # what a stage worker does per batch (``check_and_run``: run_checked)
    runs: int


def bench_checks(batches: Sequence[int] = (1, 4), *, runs: int = 30,
                 cache_dir: str | Path = DEFAULT_CACHE_DIR) -> list[CheckBench]:
    """A batch's time the way a stage worker runs it, against the executor's run alone and against
    checking every payload first: the image pipeline's two stages on their own inputs (resize: JPEG
    of 480 x 480; lite0: the raw pixels resize emits), interleaved, medians over ``runs``."""
    from ...agents.stage.serve import check_and_run

    hw = Hardware("cpu-1", "cpu", 0.0, 1)
    resize = load_executor(Variant("resize", "image-resize", 0.0, {"size": 260}), hw, cache_dir=cache_dir)
    lite0 = load_executor(Variant(MODEL, MODEL, 0.0, {"backend": "onnx"}), hw, cache_dir=cache_dir)
    jpeg = resize.example_payload()
    pixels = resize.run([jpeg])[0].emits[0].payload
    rows = []
    try:
        for name, ex, payload in (("image-resize", resize, jpeg), (MODEL, lite0, pixels)):
            for b in batches:
                items = [payload] * b
                ways = (lambda: ex.run(items), lambda: ([ex.check(p) for p in items], ex.run(items)),
                        lambda: check_and_run(ex, items))
                for way in ways:
                    way()  # warm-up
                times = [[], [], []]
                for _ in range(runs):
                    for k, way in enumerate(ways):
                        t0 = time.perf_counter()
                        way()
                        times[k].append((time.perf_counter() - t0) * 1e3)
                rows.append(CheckBench(name, b, *(statistics.median(t) for t in times), runs))
        return rows
    finally:
        resize.close()
        lite0.close()


def format_checks(rows: Sequence[CheckBench]) -> str:
    lines = [f"{'stage':<20}{'batch':>6}{'run ms':>9}{'check+run ms':>14}{'agent ms':>10}"
             f"{'check+run/run':>15}{'agent/run':>11}"]
    for r in rows:
        lines.append(f"{r.stage:<20}{r.batch:>6}{r.run_ms:>9.2f}{r.check_then_run_ms:>14.2f}{r.agent_ms:>10.2f}"
                     f"{r.check_then_run_ms / r.run_ms:>15.2f}{r.agent_ms / r.run_ms:>11.2f}")
    return "\n".join(lines)


def format_rows(rows: Sequence[ExecutorBench]) -> str:
    lines = [f"{'model':<20}{'batch':>6}{'thr':>4}{'payload':>8}{'executor/s':>12}"
             f"{'raw ort/s':>11}{'ratio':>7}"]
    for r in rows:
        lines.append(f"{r.model:<20}{r.batch:>6}{r.threads:>4}{r.payload:>8}"
                     f"{r.executor_items_per_s:>12.1f}{r.raw_ort_items_per_s:>11.1f}{r.ratio:>7.3f}")
    return "\n".join(lines)


if __name__ == "__main__":  # python -m slipstream.loadgen.bench.executor [runs]
    import os
    import platform
    import sys

    print(format_rows(bench_executor(runs=int(sys.argv[1]) if len(sys.argv) > 1 else 5)))
    print(f"onnxruntime on {platform.machine()} {platform.processor() or platform.platform()}, "
          f"{os.cpu_count()} cpus")
