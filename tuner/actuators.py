"""Actuators: apply a desired replica count per stage. Idempotent "set desired count" behind a Protocol.

- :class:`LocalProcessActuator` runs stage workers as child processes of this host. With
  ``replicas_per_worker`` (what ``slipstream up`` and the demo use) a stage's replicas run inside
  ``slipstream.streams.placement.layout(n, replicas_per_worker).workers`` processes: the replica count itself
  reaches the workers through the StageConfig the tuner publishes, and a process starts or stops only
  when the replicas no longer fit (no consumer-group rebalance otherwise). Without it every replica is
  a process of its own. Scale-up starts new processes; scale-down stops the *newest* first (the oldest have warm caches and settled partition
  assignments) with SIGTERM, then SIGKILL after ``grace_s``. Exited workers are reaped on every call
  and :meth:`reconcile` replaces them, so a crashed worker comes back.
  ``standby`` (role -> count) keeps that many warm worker processes of a role beyond what its
  replicas need (``placement.layout(n, replicas_per_worker, standby)``; none for a role at 0 replicas).
  Every worker is told a file to write its consumer-group members to (``slipstream.streams.members``);
  :meth:`take_exits` hands the supervisor the files of the workers that exited on their own, so it can
  remove their members from their groups at once instead of after the session timeout.
- :class:`DryRunActuator` only remembers the counts (``slipstream tuner --dry-run``).
- ``slipstream.tuner.k8s.KubernetesActuator`` applies a Deployment's scale subresource (pods of k replicas).

The worker command is a parameter (``argv_for(stage) -> argv``); production passes
``slipstream worker --pipeline FILE --stage NAME``.
"""
from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Protocol, Sequence

from ..streams.config import MEMBER_FILE_ENV
from ..streams.placement import layout
from ..streams.procs import lifeline

log = logging.getLogger(__name__)


class Actuator(Protocol):
    def set_replicas(self, stage: str, n: int) -> None:
        """Make ``n`` replicas of ``stage`` run (idempotent; returns once the change is issued)."""

    def replicas(self, stage: str) -> int:
        """Replicas of ``stage`` running (or desired, where the platform starts them for us)."""


class DryRunActuator:
    """Remembers the counts it was asked for; starts nothing."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def set_replicas(self, stage: str, n: int) -> None:
        self.counts[stage] = n

    def replicas(self, stage: str) -> int:
        return self.counts.get(stage, 0)


@dataclass
class Worker:
    stage: str
    proc: subprocess.Popen
    started_ns: int
    member_file: Path | None = None  # where it writes its group members (slipstream.streams.members)


@dataclass(frozen=True)
class Exit:
    """A worker that exited on its own: its role, pid, exit code and member file."""

    stage: str
    pid: int
    returncode: int
    member_file: Path | None


class LocalProcessActuator:
    """Stage workers as local processes; see the module docstring."""

    def __init__(self, argv_for: Callable[[str], Sequence[str]], *, grace_s: float = 10.0,
                 log_dir: Path | None = None, env: Mapping[str, str] | None = None,
                 restart_backoff_s: tuple[float, float] = (1.0, 30.0),
                 clock: Callable[[], float] = time.monotonic, replicas_per_worker: int | None = None,
                 max_replicas: int | None = None, standby: Mapping[str, int] | None = None,
                 member_dir: Path | None = None) -> None:
        bad = {k: v for k, v in (standby or {}).items() if v < 0}
        if bad:
            raise ValueError(f"standby workers must be >= 0: {bad}")
        self._argv_for = argv_for
        self.standby = dict(standby or {})
        # the workers' member files; without one, a folder of this actuator's own (removed at close)
        self._own_member_dir = member_dir is None
        self._member_dir = Path(tempfile.mkdtemp(prefix="slipstream-members-")) if member_dir is None else member_dir
        self._exits: list[Exit] = []
        self.replicas_per_worker = replicas_per_worker
        self.max_replicas = max_replicas  # this host's capacity: more would add contention, not capacity
        self._replicas: dict[str, int] = {}
        self.grace_s = grace_s
        self._log_dir = log_dir
        # ``env`` adds to this process's environment (prefixes, SLIPSTREAM_PROCESSING, calibration...);
        # the lifeline stops the workers if this process dies without stopping them (slipstream.streams.procs)
        self._env, self._pass_fds = lifeline({**os.environ, **(env or {})})
        self.started: list[tuple[str, int]] = []  # (stage, pid) of every worker started, for reports
        self._workers: dict[str, list[Worker]] = {}
        self._desired: dict[str, int] = {}
        self.unexpected_exits = 0  # workers that exited without being asked to (crashes)
        self._seq = 0
        # crash loops: the first crash of a stage within a minute is replaced at once, the n-th
        # (n >= 2) after min(lo * 2^(n-2), hi) seconds
        self._backoff_lo, self._backoff_hi = restart_backoff_s
        self._clock = clock
        self._crashes: dict[str, list[float]] = {}
        self._lock = threading.RLock()  # the tuner and the supervisor's reconcile call from threads

    # ---- Actuator

    def set_replicas(self, stage: str, n: int) -> None:
        if n < 0:
            raise ValueError(f"replicas must be >= 0, got {n} for stage {stage!r}")
        if self.max_replicas is not None and n > self.max_replicas:
            log.warning("stage %s: %d replicas asked, this host runs at most %d", stage, n, self.max_replicas)
            n = self.max_replicas
        with self._lock:
            self._replicas[stage] = n
            self._desired[stage] = self.processes_for(n, self.standby.get(stage, 0))
            self._converge(stage)

    def replicas(self, stage: str) -> int:
        with self._lock:
            self._reap(stage)
            running = len(self._workers.get(stage, []))
            if self.replicas_per_worker is None:
                return running
            return min(self._replicas.get(stage, 0), running * self.replicas_per_worker)

    def processes_for(self, n: int, standby: int = 0) -> int:
        """Worker processes that hold ``n`` replicas, plus ``standby`` warm ones (none when ``n`` is 0)."""
        if n == 0:
            return 0
        per_worker = self.replicas_per_worker
        return n + standby if per_worker is None else layout(n, per_worker, standby).processes

    # ---- extras

    def pids(self, stage: str) -> list[int]:
        """PIDs of the running workers of ``stage``, oldest first."""
        with self._lock:
            self._reap(stage)
            return [w.proc.pid for w in self._workers.get(stage, [])]

    def desired(self, stage: str) -> int:
        """Worker processes ``stage`` should run (standby ones included)."""
        with self._lock:
            return self._desired.get(stage, 0)

    def members(self, stage: str | None = None) -> list[Path]:
        """Member files of the running workers (of ``stage``, or of every role)."""
        with self._lock:
            roles = [stage] if stage is not None else list(self._workers)
            for r in roles:
                self._reap(r)
            return [w.member_file for r in roles for w in self._workers.get(r, []) if w.member_file is not None]

    def take_exits(self) -> list[Exit]:
        """The workers that exited on their own since the last call (oldest first)."""
        with self._lock:
            for stage in list(self._workers):
                self._reap(stage)
            out, self._exits = self._exits, []
            return out

    def reconcile(self) -> int:
        """Replace workers that exited on their own; returns how many were started."""
        started = 0
        with self._lock:
            for stage in list(self._desired):
                self._reap(stage)
                missing = self._desired[stage] - len(self._workers.get(stage, []))
                if missing > 0 and self._clock() >= self.restart_at(stage):
                    started += missing
                    self._converge(stage)
        return started

    def restart_at(self, stage: str) -> float:
        """When (on the actuator's clock) a crashed worker of ``stage`` may be replaced."""
        now = self._clock()
        recent = [t for t in self._crashes.get(stage, []) if t > now - 60.0]
        self._crashes[stage] = recent
        if len(recent) < 2:  # the first crash of a minute: at once (a killed worker's partitions wait)
            return recent[-1] if recent else now
        delay = min(self._backoff_lo * 2 ** (len(recent) - 2), self._backoff_hi)
        return recent[-1] + delay

    def close(self) -> None:
        """Stop every worker (newest first, in parallel per stage)."""
        with self._lock:
            for stage in list(self._workers):
                self._desired[stage] = 0
                self._converge(stage)
            if self._own_member_dir:
                shutil.rmtree(self._member_dir, ignore_errors=True)

    # ---- internals

    def _converge(self, stage: str) -> None:
        self._reap(stage)
        running = self._workers.setdefault(stage, [])
        want = self._desired.get(stage, 0)
        while len(running) < want:
            running.append(self._start(stage))
        if len(running) > want:
            victims = running[want:][::-1]  # newest first
            del running[want:]
            self._stop(victims)

    def _start(self, stage: str) -> Worker:
        argv = list(self._argv_for(stage))
        self._seq += 1
        out = subprocess.DEVNULL
        member_file = self._member_dir / f"{stage}-{self._seq}.json"
        member_file.unlink(missing_ok=True)
        if self._log_dir is not None:
            self._log_dir.mkdir(parents=True, exist_ok=True)
            out = open(self._log_dir / f"{stage}-{self._seq}.log", "ab")
        try:
            # own session: SIGTERM reaches the worker's whole process group, not our terminal's
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env={**self._env, MEMBER_FILE_ENV: str(member_file)},
                                    start_new_session=True, pass_fds=self._pass_fds)
        finally:
            if out is not subprocess.DEVNULL:
                out.close()
        self.started.append((stage, proc.pid))
        log.info("started %s worker pid=%d: %s", stage, proc.pid, " ".join(argv))
        return Worker(stage, proc, time.time_ns(), member_file)

    def _stop(self, victims: list[Worker]) -> None:
        for w in victims:
            _signal_group(w.proc, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        for w in victims:
            try:
                w.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("%s worker pid=%d ignored SIGTERM for %.1fs: SIGKILL", w.stage, w.proc.pid,
                            self.grace_s)
                _signal_group(w.proc, signal.SIGKILL)
                w.proc.wait()
            log.info("stopped %s worker pid=%d rc=%s", w.stage, w.proc.pid, w.proc.returncode)

    def _reap(self, stage: str) -> None:
        running = self._workers.get(stage, [])
        alive = [w for w in running if w.proc.poll() is None]
        for w in running:
            if w.proc.returncode is not None:
                self.unexpected_exits += 1
                self._crashes.setdefault(stage, []).append(self._clock())
                self._exits.append(Exit(stage, w.proc.pid, w.proc.returncode, w.member_file))
                log.warning("%s worker pid=%d exited on its own rc=%s", stage, w.proc.pid, w.proc.returncode)
        self._workers[stage] = alive


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # start_new_session made pid the group id
    except ProcessLookupError:
        pass
