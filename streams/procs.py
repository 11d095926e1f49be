"""Child processes that announce readiness on their output: stage workers (``slipstream worker``
prints ``slipstream-worker ready ...``) and benchmark relays. Readiness is an event set by a reader
thread when the line appears, never a sleep.

Children that must not outlive their parent (the workers a run, the demo or ``slipstream up``
starts) hold a *lifeline*: the read end of a pipe whose write end only the parent holds
(:func:`lifeline`). However the parent ends, SIGKILL included, the kernel closes that end and the
child's read returns EOF; :func:`exit_with_parent` (the worker calls it first thing) then stops the
child as SIGTERM does, and kills it after a grace period. Without it, the workers of a killed run
would stay in their consumer groups and serve later runs' requests unseen."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
from typing import Mapping, Sequence

from .config import LIFELINE_ENV, take_lifeline_fd

EXIT_GRACE_S = 30.0  # after the SIGTERM a lost parent causes: a worker's drain is bounded well within it
_pipe: tuple[int, int] | None = None
_pipe_lock = threading.Lock()

WORKER_READY = re.compile(r"slipstream-worker ready stage=(\S+) partitions=(\d+)")


def worker_argv(pipeline_file: str, stage: str, loglevel: str = "info", max_replicas: int | None = None,
                profiles: str | None = None) -> list[str]:
    argv = [sys.executable, "-m", "slipstream.cli", "worker", "--pipeline", str(pipeline_file),
            "--stage", stage, "--loglevel", loglevel]
    argv += ["--max-replicas", str(max_replicas)] if max_replicas else []
    return argv + (["--profiles", str(profiles)] if profiles else [])


def worker_id(pid: int | None = None) -> str:
    """A stage worker process's name in its hops (``HopTiming.worker`` less ``/<index>``, the replica): host-pid
    (default: this process's)."""
    return f"{socket.gethostname()}-{os.getpid() if pid is None else pid}"


def join_id(pid: int | None = None) -> str:
    """The join worker's name in the hops it adds: join-pid (default: this process's)."""
    return f"join-{os.getpid() if pid is None else pid}"


def lifeline(env: Mapping[str, str] | None = None) -> tuple[dict[str, str], tuple[int, ...]]:
    """``(env, pass_fds)`` for a child that must stop when this process ends: ``env`` (default: this
    process's) plus :data:`LIFELINE_ENV`, and the pipe's read end to pass. One pipe serves every
    child; its ends are not inheritable, so only children given the read end hold it, and only this
    process holds the write end."""
    global _pipe
    with _pipe_lock:
        if _pipe is None:
            _pipe = os.pipe()
    base = dict(os.environ if env is None else env)
    return {**base, LIFELINE_ENV: str(_pipe[0])}, (_pipe[0],)


def exit_with_parent(grace_s: float = EXIT_GRACE_S, on_lost=None) -> threading.Thread | None:
    """When this process was given a lifeline (:func:`lifeline`), watch it on a daemon thread: at EOF
    (the parent is gone) send this process SIGTERM and, if it still runs ``grace_s`` later, SIGKILL.
    ``on_lost`` (a callable) is told first, for a log line. None without a lifeline."""
    raw = take_lifeline_fd()
    if raw is None:
        return None
    try:
        fd = int(raw)
        os.fstat(fd)
    except (ValueError, OSError):
        return None  # set, but no such descriptor here (a shell copied the variable): nothing to watch

    def watch() -> None:
        while os.read(fd, 1):  # the parent never writes: data is ignored, EOF means it is gone
            pass
        if on_lost is not None:
            on_lost()
        os.kill(os.getpid(), signal.SIGTERM)
        threading.Event().wait(grace_s)  # a bound on the drain, not a synchronisation
        os.kill(os.getpid(), signal.SIGKILL)

    t = threading.Thread(target=watch, name="lifeline", daemon=True)
    t.start()
    return t


class ReadyProcess:
    """A child process whose ready line (a regex; for workers, with at least one partition) sets
    :attr:`ready`. Its output is kept (last lines) for error messages."""

    def __init__(self, argv: Sequence[str], ready: re.Pattern = WORKER_READY,
                 env: Mapping[str, str] | None = None, name: str = "") -> None:
        self.name = name or " ".join(argv[-3:])
        self.ready = threading.Event()
        self.lines: list[str] = []
        self._pattern = ready
        child_env, fds = lifeline({**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
        self.proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=child_env, pass_fds=fds)
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
