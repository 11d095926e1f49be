"""Child processes that announce readiness on their output: stage workers (``slipstream worker``
prints ``slipstream-worker ready ...``) and benchmark relays. Readiness is an event set by a reader
thread when the line appears, never a sleep."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from typing import Mapping, Sequence

WORKER_READY = re.compile(r"slipstream-worker ready stage=(\S+) partitions=(\d+)")


def worker_argv(pipeline_file: str, stage: str, loglevel: str = "info", max_instances: int | None = None,
                profiles: str | None = None) -> list[str]:
    argv = [sys.executable, "-m", "slipstream.cli", "worker", "--pipeline", str(pipeline_file),
            "--stage", stage, "--loglevel", loglevel]
    argv += ["--max-instances", str(max_instances)] if max_instances else []
    return argv + (["--profiles", str(profiles)] if profiles else [])


class ReadyProcess:
    """A child process whose ready line (a regex; for workers, with at least one partition) sets
    :attr:`ready`. Its output is kept (last lines) for error messages."""

    def __init__(self, argv: Sequence[str], ready: re.Pattern = WORKER_READY,
                 env: Mapping[str, str] | None = None, name: str = "") -> None:
        self.name = name or " ".join(argv[-3:])
        self.ready = threading.Event()
        self.lines: list[str] = []
        self._pattern = ready
        self.proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            del self.lines[:-200]
            m = self._pattern.search(line)
            if m and (m.lastindex is None or m.lastindex < 2 or int(m.group(2)) > 0):
                self.ready.set()

    def wait_ready(self, timeout: float = 90.0) -> None:
        if not self.ready.wait(timeout):
            tail = "".join(self.lines[-30:])
            raise TimeoutError(f"{self.name} not ready within {timeout:.0f} s:\n{tail}")

    def stop(self, grace_s: float = 20.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
