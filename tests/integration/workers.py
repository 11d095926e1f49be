"""Real stage worker processes for the integration tests: started with `slipstream worker`, ready
when they print their ready line (an event read from their output, not a sleep)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import yaml

READY = re.compile(r"slipstream-worker ready stage=(\S+) partitions=(\d+)")


def unique_pipeline(src: Path, name: str, tmp: Path, **overrides) -> Path:
    """A copy of a pipeline spec under a fresh name (fresh topics and groups), with overrides."""
    doc = yaml.safe_load(src.read_text())
    doc["name"] = name
    doc.update(overrides)
    out = tmp / f"{name}.yaml"
    out.write_text(yaml.safe_dump(doc))
    return out


class Worker:
    def __init__(self, pipeline: Path, stage: str, env: dict) -> None:
        self.stage = stage
        self.ready = threading.Event()
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "slipstream.cli", "worker", "--pipeline", str(pipeline),
             "--stage", stage, "--loglevel", "info"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            m = READY.search(line)
            if m and int(m.group(2)) > 0:
                self.ready.set()

    def wait_ready(self, timeout: float = 90.0) -> None:
        if not self.ready.wait(timeout):
            tail = "".join(self.lines[-30:])
            raise TimeoutError(f"worker {self.stage} not ready in {timeout}s:\n{tail}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Workers:
    def __init__(self, pipeline: Path, bootstrap: str) -> None:
        self.pipeline = pipeline
        self.env = {**os.environ, "SLIPSTREAM_BOOTSTRAP": bootstrap, "PYTHONUNBUFFERED": "1"}
        self.running: list[Worker] = []

    def start(self, *stages: str, wait: bool = True) -> list[Worker]:
        new = [Worker(self.pipeline, s, self.env) for s in stages]
        self.running += new
        if wait:
            for w in new:
                w.wait_ready()
        return new

    def log(self) -> str:
        return "\n".join(f"--- {w.stage}\n" + "".join(w.lines[-40:]) for w in self.running)

    def stop(self) -> None:
        for w in self.running:
            w.stop()
