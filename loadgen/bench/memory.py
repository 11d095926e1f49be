"""Memory per worker kind (`slipstream bench memory`): the resident set of a ready worker process.

Each worker is started as `slipstream worker` starts it (``slipstream.streams.procs.worker_argv``), against the
real broker, and measured once it prints its ready line: its model loaded and warmed at batch 1 and
its max batch. Read from ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``: the peak, loading included)
and ``/proc/<pid>/maps`` (whether ``libtorch`` is mapped into the process: an ONNX worker must not
import torch, issue 12).
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from ...streams import admin, topics
from ...streams.assets import deploy_dir
from ...streams.config import BOOTSTRAP_ENV, KafkaSettings
from ...streams.procs import ReadyProcess, worker_argv
from ...streams.spec import load_pipeline

PIPELINES = deploy_dir() / "pipelines"
# (pipeline file, stage, what it serves): one worker of each kind the repo ships
KINDS = (
    ("image-classify.yaml", "resize", "model-free (image-resize)"),
    ("image-classify.yaml", "classify", "ONNX EfficientNet-Lite0"),
    ("dag-fanout.yaml", "classify", "torch synthetic MLP"),
    ("text-embed.yaml", "embed", "torch MiniLM-L6"),
    ("dag-fanout.yaml", "join", "join"),
)


@dataclass(frozen=True)
class Memory:
    worker: str
    rss_mib: float
    peak_mib: float
    torch: bool


def status_kib(status: str, field: str) -> int:
    """A ``kB`` field (``VmRSS``, ``VmHWM``) of a ``/proc/<pid>/status`` text."""
    for line in status.splitlines():
        if line.startswith(field + ":"):
            value, unit = line.split(":", 1)[1].split()
            if unit != "kB":
                raise ValueError(f"{field} in {unit}, expected kB")
            return int(value)
    raise KeyError(f"no {field} in the status text")


def maps_torch(maps: str) -> bool:
    """Whether a ``/proc/<pid>/maps`` text maps torch's shared library."""
    return any(line.rsplit("/", 1)[-1].startswith("libtorch") for line in maps.splitlines() if "/" in line)


def measure(pid: int, worker: str) -> Memory:
    proc = Path(f"/proc/{pid}")
    status = (proc / "status").read_text()
    return Memory(worker, status_kib(status, "VmRSS") / 1024, status_kib(status, "VmHWM") / 1024,
                  maps_torch((proc / "maps").read_text()))


def run(settings: KafkaSettings, kinds=KINDS, timeout_s: float = 600.0, progress=print) -> list[Memory]:
    rows = []
    for file, stage, what in kinds:
        path = PIPELINES / file
        asyncio.run(admin.ensure_topics(settings, topics.all_topics(load_pipeline(path))))
        progress(f"{what}: starting a {file} {stage} worker")
        p = ReadyProcess(worker_argv(path, stage, "warn"), env={BOOTSTRAP_ENV: settings.bootstrap},
                         name=f"{file}:{stage}")
        try:
            p.wait_ready(timeout_s)  # a first start exports the model (cached after)
            rows.append(measure(p.proc.pid, f"{what} ({file[:-5]} {stage})"))
        finally:
            p.stop()
    return rows


def format_rows(rows: list[Memory]) -> str:
    lines = [f"{'worker':58} {'RSS MiB':>8} {'peak MiB':>9} {'torch':>6}"]
    lines += [f"{r.worker:58} {r.rss_mib:8.0f} {r.peak_mib:9.0f} {'yes' if r.torch else 'no':>6}" for r in rows]
    return "\n".join(lines)
