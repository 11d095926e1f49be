"""CPU seconds per kind of process on this host during a run, sampled from ``/proc``.

On a small host the broker, the load generator and the control plane share the cores with the stage
workers, and past capacity their share grows with the offered load, not with what is served
(issue 40). :class:`CpuSampler` reads every process's ``utime + stime`` (``/proc/<pid>/stat``) every
``period_s`` on a thread and keeps, per process, what it used since first seen (a process that exits
keeps its last sample: at most ``period_s`` of its CPU is missed). :func:`kind_of` names a process by
its command line: ``worker <stage>``, ``join``, ``gateway``, ``broker``; this process is ``load
generator + control plane`` (the replay, and the tuner and planner when the run hosts them), and so
is a ``slipstream compare-live`` or ``demo`` process when the sampler runs beside it
(``python -m slipstream.loadgen.cpu SECONDS``).
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
SELF = "load generator + control plane"
LIVE_COMMANDS = ("compare-live", "demo", "goodput")  # slipstream commands that replay and host the tuner


def kind_of(argv: list[str]) -> str | None:
    """The kind of a process by its arguments, None for processes of no interest."""
    if any(a.endswith("kafka.Kafka") for a in argv):
        return "broker"
    if "worker" in argv and "--stage" in argv:
        stage = argv[argv.index("--stage") + 1] if argv.index("--stage") + 1 < len(argv) else "?"
        return "join" if stage == "join" else f"worker {stage}"
    if "gateway" in argv and any("slipstream" in a for a in argv):
        return "gateway"
    if any(a in argv for a in LIVE_COMMANDS) and any("slipstream" in a for a in argv):
        return SELF
    return None


def _cpu_s(pid: str) -> float | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14 and 15 of stat)


def _argv(pid: str) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


class CpuSampler:
    def __init__(self, period_s: float = 0.5) -> None:
        self.period_s = period_s
        self._first: dict[str, tuple[str, float]] = {}  # pid -> (kind, CPU s when first seen)
        self._last: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def sample(self) -> None:
        me = str(os.getpid())
        for pid in (p.name for p in Path("/proc").iterdir() if p.name.isdigit()):
            if pid not in self._first:
                kind = SELF if pid == me else kind_of(_argv(pid))
                if kind is None or (cpu := _cpu_s(pid)) is None:
                    continue
                self._first[pid] = (kind, cpu)
            if (cpu := _cpu_s(pid)) is not None:
                self._last[pid] = cpu

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.sample()

    def start(self) -> "CpuSampler":
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


if __name__ == "__main__":  # python -m slipstream.loadgen.cpu SECONDS: CPU seconds per kind over the next SECONDS
    import sys
    import time

    sampler = CpuSampler().start()
    time.sleep(float(sys.argv[1]))
    for kind, cpu in sampler.stop().items():
        print(f"{kind:<32}{cpu:>9.1f} s")
