"""CPU seconds per kind of process of this run on this host, sampled from ``/proc``.

On a small host the broker, the load generator and the control plane share the cores with the stage
workers, and past capacity their share grows with the offered load, not with what is served
(issue 40). :class:`CpuSampler` reads ``utime + stime`` (``/proc/<pid>/stat``) every ``period_s`` on a
thread and keeps, per process, what it used since first seen (a process that exits keeps its last
sample: at most ``period_s`` of its CPU is missed).

It counts this run's processes only (:func:`ours`): this process, the processes it started (its
descendants: workers, a gateway) and the broker listening on the run's bootstrap ports. The host is
shared: another run's broker, workers or load generator are not this run's cost (before, every
``kafka.Kafka`` process on the host counted as "broker"). :func:`kind_of` names a process by its command
line: ``worker <stage>``, ``join``, ``gateway``, ``broker``, ``load generator`` (the sender process of
:mod:`slipstream.loadgen.sender`); this process is ``results + control plane`` (the replay's result
reader, and the tuner and planner when the run hosts them), and so is a ``slipstream compare-live`` or
``demo`` process sampled from beside it (``python -m slipstream.loadgen.cpu SECONDS PID [BOOTSTRAP]``).

A tick reads the ``stat`` of the processes found so far; every ``rescan_s`` it reads every process's
(for the parent links) to find new ones, and a process's command line once, when it becomes one of
ours. A process that was not running at :meth:`CpuSampler.start` (its pid absent from that scan)
counts from no CPU, so finding it late loses nothing; its start time is not used, since the kernel
counts it in 10-ms ticks and a process started within the tick of the start looked older.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Iterable, Mapping

from .sender import MODULE as SENDER_MODULE

TICK = os.sysconf("SC_CLK_TCK")
SELF = "results + control plane"
SENDER = "load generator"
LIVE_COMMANDS = ("compare-live", "demo", "goodput")  # slipstream commands that replay and host the tuner
LISTEN = "0A"  # TCP state LISTEN in /proc/net/tcp


def kind_of(argv: list[str]) -> str | None:
    """The kind of a process by its arguments, None for processes of no interest."""
    if any(a.endswith("kafka.Kafka") for a in argv):
        return "broker"
    if SENDER_MODULE in argv:
        return SENDER
    if "worker" in argv and "--stage" in argv:
        stage = argv[argv.index("--stage") + 1] if argv.index("--stage") + 1 < len(argv) else "?"
        return "join" if stage == "join" else f"worker {stage}"
    if "gateway" in argv and any("slipstream" in a for a in argv):
        return "gateway"
    if any(a in argv for a in LIVE_COMMANDS) and any("slipstream" in a for a in argv):
        return SELF
    return None


def ours(roots: Iterable[str], parent: Mapping[str, str]) -> set[str]:
    """``roots`` and every process descending from one of them (``parent``: pid -> parent pid)."""
    children: dict[str, list[str]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo += children.get(pid, ())
    return out


def ports_of(bootstrap: str) -> set[int]:
    """The ports of a bootstrap list (``host:port[,host:port...]``)."""
    return {int(h.rsplit(":", 1)[1]) for h in bootstrap.split(",") if ":" in h}


def listening_inodes(ports: set[int], tables: Iterable[str]) -> set[str]:
    """Socket inodes listening on ``ports``, from the text of ``/proc/net/tcp``-style tables."""
    out = set()
    for table in tables:
        for line in table.splitlines()[1:]:
            f = line.split()
            if len(f) > 9 and f[3] == LISTEN and int(f[1].rsplit(":", 1)[1], 16) in ports:
                out.add(f[9])
    return out


def listeners(ports: set[int]) -> set[str]:
    """The pids of the processes listening on ``ports`` on this host (the run's brokers)."""
    if not ports:
        return set()
    tables = [p.read_text() for p in (Path("/proc/net/tcp"), Path("/proc/net/tcp6")) if p.exists()]
    inodes = {f"socket:[{i}]" for i in listening_inodes(ports, tables)}
    out = set()
    for proc in (p for p in Path("/proc").iterdir() if p.name.isdigit()):
        try:
            if any(os.readlink(fd) in inodes for fd in (proc / "fd").iterdir()):
                out.add(proc.name)
        except OSError:
            continue
    return out


def _stat(pid: str) -> tuple[str, float] | None:
    """(parent pid, CPU seconds) of a process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    f = stat[stat.rindex(")") + 2:].split()  # after the command name, which may hold spaces
    return f[1], (int(f[11]) + int(f[12])) / TICK  # ppid; utime + stime


def _argv(pid: str) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


class CpuSampler:
    """CPU seconds per kind of ``roots`` (this process by default), their descendants and the
    processes listening on ``ports`` (the run's brokers)."""

    def __init__(self, period_s: float = 0.5, ports: Iterable[int] = (), roots: Iterable[int] | None = None,
                 rescan_s: float = 2.0) -> None:
        self.period_s, self.rescan_s = period_s, rescan_s
        self.ports = set(ports)
        self._roots = {str(p) for p in roots} if roots is not None else {str(os.getpid())}
        self._first: dict[str, tuple[str, float]] = {}  # pid -> (kind, CPU s when first seen)
        self._last: dict[str, float] = {}
        self._at_start: set[str] | None = None  # every pid at start: a process not among them counts from 0 CPU
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def sample(self, rescan: bool = True) -> None:
        """Every process's stat, to find this run's (``rescan``), or only those found before."""
        me = str(os.getpid())
        pids = (p.name for p in Path("/proc").iterdir() if p.name.isdigit()) if rescan else list(self._first)
        stats = {pid: s for pid in pids if (s := _stat(pid)) is not None}
        found = ours(self._roots & stats.keys(), {p: s[0] for p, s in stats.items()}) if rescan else stats
        if self._at_start is None:
            self._at_start = set(stats)
        for pid in found:
            if pid not in self._first:
                kind = SELF if pid == me else kind_of(_argv(pid)) or "other"
                self._first[pid] = (kind, stats[pid][1] if pid in self._at_start else 0.0)
            self._last[pid] = stats[pid][1]

    def _run(self) -> None:
        last_scan = time.monotonic()
        while not self._stop.wait(self.period_s):
            rescan = time.monotonic() - last_scan >= self.rescan_s
            self.sample(rescan)
            last_scan = time.monotonic() if rescan else last_scan

    def start(self) -> "CpuSampler":
        self._roots |= listeners(self.ports)
        self.sample()
        self._thread.start()
        return self

    def stop(self) -> dict[str, float]:
        """CPU seconds per kind since :meth:`start`."""
        self._stop.set()
        self._thread.join()
        self.sample()
        out: dict[str, float] = {}
        for pid, (kind, first) in self._first.items():
            out[kind] = out.get(kind, 0.0) + self._last.get(pid, first) - first
        return dict(sorted(out.items()))


if __name__ == "__main__":  # python -m slipstream.loadgen.cpu SECONDS PID [BOOTSTRAP]: CPU s per kind over SECONDS
    import sys

    sampler = CpuSampler(roots=[int(sys.argv[2])], ports=ports_of(sys.argv[3]) if len(sys.argv) > 3 else ()).start()
    time.sleep(float(sys.argv[1]))
    for kind, cpu in sampler.stop().items():
        print(f"{kind:<32}{cpu:>9.1f} s")
