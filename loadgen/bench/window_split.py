"""How much of the workers' own CPU a window costs, and how much a request (``HostModel.window_cpu_ms``
and ``request_cpu_ms``; docs/results.md, "Goodput past capacity").

``python -m slipstream.loadgen.bench.window_split REPORT_DIR [RATE]`` (with the broker up, under the
machine lock): one plan, whatever the planner picks for the rate, with max batch 8 and no batch
timeout at every stage, live for 60 s at RATE requests/s (default 25) four times: arriving evenly
(windows of one), in bursts of 8 (full windows), evenly, in bursts. Each run's CPU per process over
the replay (``slipstream.loadgen.cpu``) and its windows (the results' distinct batches per stage)
are printed. Between an even run and a burst run the requests are the same, the windows not: the
workers' CPU saved, less what the models' own batching saves (the profiles' p50 per item at the
batch sizes run), over the windows saved, is the CPU a window costs its worker.
"""
from __future__ import annotations

import collections
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

PIPELINE = "deploy/pipelines/image-classify.yaml"
STAGES = ("resize", "classify")


class _FullWindows:
    """A planner whose plan takes windows of up to 8, at once."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def plan(self, problem):
        p = self.inner.plan(problem)
        return replace(p, stages=tuple(replace(sp, assignments=tuple(replace(a, max_batch=8, batch_timeout_ms=0.0)
                                                                     for a in sp.assignments))
                                       for sp in p.stages))


def windows(report: Path) -> dict[str, tuple[int, int, dict[int, int]]]:
    """Per stage: (items, windows, batches by size) of a run's results."""
    from ..run_record import RunRecord

    seen: dict[str, dict] = collections.defaultdict(dict)
    items: collections.Counter = collections.Counter()
    for r in RunRecord(report).results():
        for h in r.hops:
            seen[h.stage][(h.worker, h.started_ns)] = h.batch_size
            items[h.stage] += 1
    return {s: (items[s], len(seen[s]), dict(collections.Counter(seen[s].values()))) for s in seen}


def model_ms(store, variant: str, sizes: dict[int, int]) -> float:
    """The model's own time (ms) over batches of these sizes on cpu-1, at the profile's p50
    (interpolated between the profiled sizes)."""
    pts = sorted(store.get(variant, "cpu-1").points.items())
    xs, ys = [b for b, _ in pts], [p.p50_ms for _, p in pts]
    return sum(n * float(np.interp(b, xs, ys)) for b, n in sizes.items())


def window_ms(even: dict, burst: dict, variants: dict[str, str], store) -> float:
    """CPU ms a window costs the workers: what they saved with fewer windows (``burst`` against
    ``even``, each a run's ``cpu.json``), less the models' own batching gain, per window saved."""
    saved_cpu = saved_windows = 0.0
    for stage in STAGES:
        (_, w_e, sizes_e), (_, w_b, sizes_b) = even["windows"][stage], burst["windows"][stage]
        model = model_ms(store, variants[stage], _ints(sizes_e)) - model_ms(store, variants[stage], _ints(sizes_b))
        saved_cpu += 1e3 * (even["cpu_s"][f"worker {stage}"] - burst["cpu_s"][f"worker {stage}"]) - model
        saved_windows += w_e - w_b
    return saved_cpu / saved_windows


def _ints(sizes: dict) -> dict[int, int]:
    return {int(b): n for b, n in sizes.items()}


def main(out: Path, rate: float = 25.0) -> None:
    from ...planner import modes
    from ...streams.profile_store import ProfileStore
    from ...streams.spec import load_pipeline
    from ..live.run import LiveOptions, live_run

    make = modes.make_planner
    modes.make_planner = lambda mode, *a, **k: _FullWindows(make(mode, *a, **k))
    pipe, store = load_pipeline(PIPELINE), ProfileStore(".state/profiles")
    opts = LiveOptions(mode="milp", tune=False, activation_s=1.0, replan_s=0.0, sample_cpu=True, seed=0)
    even = np.arange(0, 60, 1 / rate)
    burst = np.repeat(np.arange(0, 60, 8 / rate), 8)
    for name in ("even1", "burst1", "even2", "burst2"):
        run = live_run(pipe, PIPELINE, even if name.startswith("even") else burst, even[even < 20], store,
                       out / name, opts, f"window split {name}")
        rec = {"name": name, "sent": int(run.summary.requests), "cpu_s": run.cpu_s,
               "windows": windows(out / name)}
        (out / name / "cpu.json").write_text(json.dumps(rec))
        print("SPLIT", json.dumps(rec), flush=True)
    report(out, store)


def report(out: Path, store) -> None:
    runs = {n: json.loads((out / n / "cpu.json").read_text()) for n in ("even1", "burst1", "even2", "burst2")}
    variants = {"resize": "resize-260", "classify": "lite0"}
    for e, b in (("even1", "burst1"), ("even2", "burst2")):
        print(f"{e} / {b}: {window_ms(runs[e], runs[b], variants, store):.2f} ms of the workers' CPU a window")


if __name__ == "__main__":
    if sys.argv[1] == "--report":  # the figures of runs already made
        from ...streams.profile_store import ProfileStore

        report(Path(sys.argv[2]), ProfileStore(".state/profiles"))
    else:
        main(Path(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 25.0)
