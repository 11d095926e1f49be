"""CPU per dropped request against CPU per served one, in a stage worker's own code (no Kafka).

Past capacity a worker answers most of what it reads ``dropped``, so what a drop costs decides how
much of the CPU is left to serve (docs/results.md, "Goodput past capacity"). Three ways through the
image pipeline's stages (resize on a 480 x 480 JPEG, lite0 on the pixels resize emits), each timed
as process CPU per request over a window of ``batch`` requests, interleaved, medians over ``runs``:

- **served**: admitted (decoded, checked against the contract), run on the model as a stage worker
  runs it (``check_and_run``), its output records built and Avro-encoded;
- **dropped, decoded**: an expired request read as every record was before the expiry header
  (decoded and checked, then dropped by its deadline), its ``dropped`` result built and encoded;
- **dropped from headers**: the same request written with its expiry header (``slipstream.streams.expiry``),
  dropped before it is decoded, its result built and encoded.

Kafka's share (fetching the record, producing the answer, the broker) is outside this figure: the
live sweep (``slipstream bench goodput``) reports CPU seconds per process.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Sequence

from ...agents import routing
from ...agents.admission import admit
from ...agents.models.export import DEFAULT_CACHE_DIR
from ...agents.stage.serve import check_and_run
from ...agents.window import batch_outputs
from ...agents.zoo import load_executor
from ...streams import codec, contract, kafka as kclient
from ...streams.client import make_request
from ...streams.shedding import SourceGate
from ...streams.spec import Pipeline, load_pipeline

PIPELINE = Path(__file__).resolve().parents[2] / "deploy" / "pipelines" / "image-classify.yaml"
WAYS = ("served", "dropped, decoded", "dropped from headers")


@dataclass(frozen=True)
class DropBench:
    stage: str
    variant: str
    payload_bytes: int
    cpu_us: dict  # way -> median CPU microseconds per request
    runs: int

    def ratio(self, way: str) -> float:
        return self.cpu_us[way] / self.cpu_us["served"]


def _records(pipe: Pipeline, payload: bytes, n: int, created_ns: int, headers: bool) -> list:
    reqs = [make_request(pipe, payload, created_ns=created_ns) for _ in range(n)]
    return [SimpleNamespace(topic="in", partition=0, offset=i, key=r.request_id.encode(),
                            headers=kclient.headers_for("InferenceRequest", r) if headers else [],
                            value=codec.encode("InferenceRequest", r)) for i, r in enumerate(reqs)]


def _encode(outs: list) -> None:
    for o in outs:
        codec.encode(o.record, o.value)


def _window(pipe: Pipeline, stage: str, ex, records: list, bounds: contract.Bounds) -> Callable[[], None]:
    """One window of ``records`` through a worker's intake and answers (the decision by deadline in it)."""
    def run() -> None:
        now = time.time_ns()
        gate = SourceGate(stage)
        got = admit(pipe, [(("in", 0), records, now)], bounds, now, lambda d: gate.judge(d, now, 0))
        if got.items:
            bad, outs = check_and_run(ex, [it.req.payload for it in got.items])
            done = time.time_ns()
            for rs in batch_outputs(pipe, stage, ex.variant, 1.0, got.items, outs, None, now, done, "bench"):
                _encode(rs)
        _encode([routing.ended(pipe, it.req, "dropped", why, now) for it, why in got.dropped])
    return run


def bench_drops(batch: int = 8, runs: int = 30, pipeline: Path = PIPELINE,
                cache_dir: str | Path = DEFAULT_CACHE_DIR) -> list[DropBench]:
    pipe = load_pipeline(pipeline)
    rows, payload = [], None
    for spec in pipe.stages:
        v = pipe.stage(spec.name).variant(spec.defaults.variant)
        ex = load_executor(v, pipe.hardware[spec.defaults.hardware], cache_dir=cache_dir)
        try:
            payload = ex.example_payload() if payload is None else payload
            bounds = contract.Bounds.of(pipe, spec.name, 64 << 20)
            stale = time.time_ns() - 10 * int(pipe.slo_ms * 1e6)
            windows = {"served": lambda: _records(pipe, payload, batch, time.time_ns(), True),
                       "dropped, decoded": lambda: _records(pipe, payload, batch, stale, False),
                       "dropped from headers": lambda: _records(pipe, payload, batch, stale, True)}
            cpu = {w: [] for w in WAYS}
            for k in range(runs + 1):
                for way in WAYS:
                    run = _window(pipe, spec.name, ex, windows[way](), bounds)
                    t0 = time.process_time()
                    run()
                    if k:  # the first round warms up
                        cpu[way].append((time.process_time() - t0) / batch * 1e6)
            rows.append(DropBench(spec.name, v.name, len(payload), {w: statistics.median(c) for w, c in cpu.items()},
                                  runs))
            payload = ex.run([payload])[0].emits[0].payload  # the next stage's input
        finally:
            ex.close()
    return rows


def format_rows(rows: Sequence[DropBench]) -> str:
    lines = [f"{'stage':<10}{'variant':<12}{'payload':>9}" + "".join(f"{w:>22}" for w in WAYS)
             + f"{'decoded/served':>16}{'headers/served':>16}"]
    for r in rows:
        lines.append(f"{r.stage:<10}{r.variant:<12}{r.payload_bytes:>9}"
                     + "".join(f"{r.cpu_us[w]:>19.1f} us" for w in WAYS)
                     + f"{r.ratio('dropped, decoded'):>16.3f}{r.ratio('dropped from headers'):>16.3f}")
    return "\n".join(lines)
