"""The profiler: batch latency of each (variant, hardware, batch size) this machine can run.

It only sees ``slipstream.streams.executor.Executor`` through a factory ``(Variant, Hardware) -> Executor``
(the CLI passes ``slipstream.agents.zoo.load_executor``, which also sets the intra-op thread count from
``Hardware.threads``), so the control plane never imports the data plane. Per batch size: ``warmup``
untimed runs, then ``reps`` timed runs (``time.perf_counter_ns`` around ``Executor.run``), keeping p50
and p99; a batch size whose p50 exceeds ``max_ms`` ends the sweep (larger ones are only slower).
The clock is injectable so tests can check the bookkeeping without timing noise.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..streams.executor import Executor
from ..streams.spec import Hardware, Pipeline, Variant
from .profiles import BatchPoint, Profile, machine_info, now_iso

ExecutorFactory = Callable[[Variant, Hardware], Executor]


@dataclass(frozen=True)
class ProfilerSettings:
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    warmup: int = 5
    reps: int = 50
    max_ms: float = 5_000.0  # stop the sweep once a batch's p50 exceeds this

    def __post_init__(self) -> None:
        if self.reps < 1 or self.warmup < 0 or not self.batch_sizes:
            raise ValueError(f"profiler settings: need reps >= 1, warmup >= 0, batch sizes; got {self}")


def measure_batch(ex: Executor, batch: int, settings: ProfilerSettings,
                  clock_ns: Callable[[], int] = time.perf_counter_ns) -> BatchPoint:
    payloads = [ex.example_payload()] * batch
    for _ in range(settings.warmup):
        ex.run(payloads)
    times = np.empty(settings.reps)
    for i in range(settings.reps):
        t0 = clock_ns()
        out = ex.run(payloads)
        times[i] = (clock_ns() - t0) / 1e6
        if len(out) != batch:
            raise RuntimeError(f"executor {ex.variant}: {len(out)} outputs for a batch of {batch}")
    return BatchPoint(p50_ms=float(np.percentile(times, 50)), p99_ms=float(np.percentile(times, 99)),
                      reps=settings.reps)


def profile_variant(variant: Variant, hardware: Hardware, factory: ExecutorFactory,
                    settings: ProfilerSettings = ProfilerSettings(), *,
                    progress: Callable[[int], None] | None = None,
                    clock_ns: Callable[[], int] = time.perf_counter_ns) -> Profile:
    """Profile one (variant, hardware); ``progress(1)`` is called after each batch size."""
    ex = factory(variant, hardware)
    points: dict[int, BatchPoint] = {}
    try:
        for b in settings.batch_sizes:
            pt = measure_batch(ex, b, settings, clock_ns)
            points[b] = pt
            if progress:
                progress(1)
            if pt.p50_ms > settings.max_ms:
                break
        device = getattr(ex, "device", "?")
    finally:
        ex.close()
    machine = dict(machine_info(), device=device, threads=hardware.threads)
    return Profile(variant.name, hardware.name, points, machine, now_iso(), "measured", "p99",
                   variant.accuracy)


def runnable_hardware(pipe: Pipeline, has_cuda: bool) -> list[Hardware]:
    """Hardware of the catalog this machine can run: every CPU entry, CUDA ones only with a GPU."""
    return [h for h in pipe.hardware.values() if h.kind == "cpu" or (h.kind == "cuda" and has_cuda)]


def has_cuda() -> bool:
    """A CUDA device onnxruntime can use (torch is an optional extra: not needed to ask)."""
    try:
        import onnxruntime
    except ImportError:
        return False
    return "CUDAExecutionProvider" in onnxruntime.get_available_providers()


def profile_into(store, todo, factory: ExecutorFactory, settings: ProfilerSettings, *, show: bool = False) -> None:
    """Profile each (variant, hardware) of ``todo`` into ``store`` with a progress bar (`slipstream
    profile`, and a live run's missing profiles); ``show`` also writes each profile's points."""
    from tqdm import tqdm

    with tqdm(total=len(todo) * len(settings.batch_sizes), unit="batch size", desc="profiling") as bar:
        for v, h in todo:
            bar.set_postfix_str(f"{v.name}@{h.name}")
            prof = profile_variant(v, h, factory, settings, progress=bar.update)
            path = store.save(prof)
            if show:
                pts = ", ".join(f"b{b}: p50 {p.p50_ms:.1f} / p99 {p.p99_ms:.1f} ms" for b, p in prof.points.items())
                bar.write(f"{path}: {pts}")
