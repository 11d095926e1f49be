"""Real stage worker processes for the integration tests (``slipstream.streams.procs``), on fresh pipelines."""
from __future__ import annotations

import sys
from pathlib import Path

import yaml

from slipstream.gateway.server import READY as GATEWAY_READY
from slipstream.streams.procs import ReadyProcess, worker_argv


def unique_pipeline(src: Path, name: str, tmp: Path, **overrides) -> Path:
    """A copy of a pipeline spec under a fresh name (fresh topics and groups), with overrides."""
    doc = yaml.safe_load(src.read_text())
    doc["name"] = name
    doc.update(overrides)
    out = tmp / f"{name}.yaml"
    out.write_text(yaml.safe_dump(doc))
    return out


class Workers:
    def __init__(self, pipeline: Path, bootstrap: str, env: dict[str, str] | None = None) -> None:
        self.pipeline = pipeline
        self.env = {"SLIPSTREAM_BOOTSTRAP": bootstrap, **(env or {})}
        self.running: list[ReadyProcess] = []

    def start(self, *stages: str, wait: bool = True) -> list[ReadyProcess]:
        new = [ReadyProcess(worker_argv(self.pipeline, s), env=self.env, name=f"worker {s}") for s in stages]
        self.running += new
        if wait:
            for w in new:
                w.wait_ready()
        return new

    def stop(self) -> None:
        for w in self.running:
            w.stop()



def start_gateway(pipeline: Path, bootstrap: str, *options: str, timeout_s: float = 60.0) -> tuple[ReadyProcess, str]:
    """A real `slipstream gateway` process on a free port, ready: (process, base URL)."""
    proc = ReadyProcess([sys.executable, "-m", "slipstream.cli", "gateway", "--pipeline", str(pipeline),
                         "--addr", "127.0.0.1:0", *options], ready=GATEWAY_READY,
                        env={"SLIPSTREAM_BOOTSTRAP": bootstrap}, name="gateway")
    proc.wait_ready(timeout_s)
    addr = next(m.group(1) for m in map(GATEWAY_READY.search, list(proc.lines)) if m)
    return proc, f"http://{addr}"
