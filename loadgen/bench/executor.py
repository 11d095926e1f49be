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

from agents.executors import ModelExecutor
from agents.models.export import DEFAULT_CACHE_DIR, INPUT_NAME
from agents.preprocess import encode_png, synthetic_image
from agents.zoo import load_executor
from streams.spec import Hardware, Variant

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


def format_rows(rows: Sequence[ExecutorBench]) -> str:
    lines = [f"{'model':<20}{'batch':>6}{'thr':>4}{'payload':>8}{'executor/s':>12}"
             f"{'raw ort/s':>11}{'ratio':>7}"]
    for r in rows:
        lines.append(f"{r.model:<20}{r.batch:>6}{r.threads:>4}{r.payload:>8}"
                     f"{r.executor_items_per_s:>12.1f}{r.raw_ort_items_per_s:>11.1f}{r.ratio:>7.3f}")
    return "\n".join(lines)


if __name__ == "__main__":  # python -m loadgen.bench.executor [runs]
    import os
    import platform
    import sys

    print(format_rows(bench_executor(runs=int(sys.argv[1]) if len(sys.argv) > 1 else 5)))
    print(f"onnxruntime on {platform.machine()} {platform.processor() or platform.platform()}, "
          f"{os.cpu_count()} cpus")
