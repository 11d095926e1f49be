"""`slipstream bench tuner`: what the tuner costs and how fast a replica becomes useful.

1. Envelope update cost, ns per arrival (median of ``runs``), for the live tracker fed in chunks of
   the size one Kafka fetch brings, and fed one arrival at a time (the worst case), against baselines
   measured in the same run on the same trace:
   - ``numpy-append``: only copying the timestamps into a preallocated buffer (the floor);
   - ``deque-per-window``: the textbook incremental tracker, a Python deque per window;
   - ``recompute``: no incremental state, recompute the 60 s envelope at every decision (0.5 s).
2. Activation time: start a worker process and wait for the line
   ``slipstream-worker ready stage=<name> partitions=<list>`` on its stdout (the worker prints it once
   it holds its partition assignment). With ``existing`` workers already running, the time includes
   the consumer-group rebalance they go through: the tuner's activation time (scale-down waits 3x it).
"""
from __future__ import annotations

import collections
import os
import platform
import re
import selectors
import signal
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

from ...streams.arrivals import gamma_arrivals
from ...streams.procs import lifeline
from ...tuner.envelope import NS_PER_S, EnvelopeTracker, doubling_windows, envelope

READY_RE = re.compile(r"slipstream-worker ready stage=(\S+) partitions=(\S*)")


@dataclass(frozen=True)
class CostResult:
    method: str
    ns_per_arrival: float
    ratio_to_tracker: float


def _trace(rate_qps: float, seconds: float, seed: int) -> np.ndarray:
    """Arrival ns of a bursty trace (gamma, CV^2 = 4)."""
    arrivals = gamma_arrivals(rate_qps, 4.0, seconds, np.random.default_rng(seed))
    return np.round(arrivals * NS_PER_S).astype(np.int64)


def _tracker(ts: np.ndarray, windows: Sequence[float], chunk: int) -> None:
    t = EnvelopeTracker(windows)
    for i in range(0, ts.size, chunk):
        t.add(ts[i:i + chunk])


def _numpy_append(ts: np.ndarray, windows: Sequence[float], chunk: int) -> None:
    buf = np.empty(ts.size, dtype=np.int64)
    for i in range(0, ts.size, chunk):
        part = ts[i:i + chunk]
        buf[i:i + part.size] = part


def _deque_per_window(ts: np.ndarray, windows: Sequence[float], chunk: int) -> None:
    wins = [int(w * NS_PER_S) for w in windows]
    queues = [collections.deque() for _ in wins]
    best = [0] * len(wins)
    for t in ts.tolist():
        for k, w in enumerate(wins):
            q = queues[k]
            q.append(t)
            while q[0] <= t - w:
                q.popleft()
            if len(q) > best[k]:
                best[k] = len(q)


def _recompute(ts: np.ndarray, windows: Sequence[float], chunk: int, every_s: float = 0.5) -> None:
    horizon = int(max(windows) * NS_PER_S)
    step = int(every_s * NS_PER_S)
    for now in range(int(ts[0]) + step, int(ts[-1]) + 1, step):
        lo, hi = np.searchsorted(ts, [now - horizon, now])
        if hi > lo:
            envelope(ts[lo:hi] / NS_PER_S, windows)


def _time(fn, ts, windows, chunk, runs: int) -> float:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        fn(ts, windows, chunk)
        out.append((time.perf_counter_ns() - t0) / ts.size)
    return statistics.median(out)


def envelope_cost(*, n_windows: int = 10, rate_qps: float = 5000.0, seconds: float = 20.0,
                  chunk: int = 500, runs: int = 5, seed: int = 0) -> list[CostResult]:
    """ns/arrival of the tracker and the baselines on one bursty trace (CV^2 = 4)."""
    ts = _trace(rate_qps, seconds, seed)
    windows = doubling_windows(60.0 / 2 ** (n_windows - 1))[:n_windows]
    single = ts[: min(ts.size, 20_000)]  # arrival-at-a-time is slow per call: a shorter prefix
    rows = [
        ("tracker (chunk %d)" % chunk, _time(_tracker, ts, windows, chunk, runs)),
        ("tracker (chunk 1)", _time(_tracker, single, windows, 1, max(1, runs // 2))),
        ("numpy-append (chunk %d)" % chunk, _time(_numpy_append, ts, windows, chunk, runs)),
        ("deque-per-window", _time(_deque_per_window, ts, windows, 1, max(1, runs // 2))),
        ("recompute every 0.5 s", _time(_recompute, ts, windows, chunk, max(1, runs // 2))),
    ]
    base = rows[0][1]
    return [CostResult(name, ns, ns / base) for name, ns in rows]


@dataclass(frozen=True)
class ActivationResult:
    ok: bool
    seconds: tuple[float, ...] = ()
    partitions: str = ""
    error: str = ""

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds) if self.seconds else float("nan")

    @property
    def max_s(self) -> float:
        return max(self.seconds) if self.seconds else float("nan")


def _start_until_ready(argv: Sequence[str], timeout_s: float, env=None) -> tuple[subprocess.Popen, float, str]:
    """Start ``argv`` and read its stdout until the ready line; returns (process, seconds, partitions)."""
    t0 = time.monotonic()
    child_env, fds = lifeline(env)
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1, start_new_session=True, env=child_env, pass_fds=fds)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    tail: collections.deque[str] = collections.deque(maxlen=20)
    try:
        while True:
            left = timeout_s - (time.monotonic() - t0)
            if left <= 0:
                raise TimeoutError(f"no ready line within {timeout_s:.0f}s; last output:\n" + "".join(tail))
            if not sel.select(timeout=min(left, 0.5)):
                if proc.poll() is not None:
                    raise RuntimeError(f"worker exited rc={proc.returncode}; last output:\n" + "".join(tail))
                continue
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                raise RuntimeError(f"worker exited rc={proc.returncode}; last output:\n" + "".join(tail))
            tail.append(line)
            m = READY_RE.search(line)
            if m:
                return proc, time.monotonic() - t0, m.group(2)
    except BaseException:
        _stop(proc)
        raise
    finally:
        sel.close()


def _stop(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass
    if proc.stdout is not None:
        proc.stdout.close()


def activation_time(argv: Sequence[str], *, runs: int = 3, existing: int = 1, timeout_s: float = 120.0,
                    env=None) -> ActivationResult:
    """Time to the ready line of a worker joining ``existing`` running ones, ``runs`` times.

    The ready pipes of running workers are drained by nobody while the newcomer is timed, which is
    fine: a worker prints one line at start and logs to stderr (merged here) sparingly."""
    base: list[subprocess.Popen] = []
    times, parts = [], ""
    try:
        for _ in range(existing):
            proc, _, _ = _start_until_ready(argv, timeout_s, env)
            base.append(proc)
        for _ in range(runs):
            proc, seconds, parts = _start_until_ready(argv, timeout_s, env)
            times.append(seconds)
            _stop(proc)  # its leaving rebalances the group again before the next run
    except (TimeoutError, RuntimeError, OSError) as exc:
        return ActivationResult(False, tuple(times), parts, str(exc))
    finally:
        for proc in reversed(base):
            _stop(proc)
    return ActivationResult(True, tuple(times), parts)


def machine() -> dict:
    commit = "unknown"
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                timeout=5).stdout.strip() or "no commits"
    except OSError:
        pass
    return {"commit": commit, "host": platform.node(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "processor": platform.processor() or platform.machine()}


def as_dict(rows: list[CostResult], act: ActivationResult | None) -> dict:
    out = {"machine": machine(), "envelope_cost": [asdict(r) for r in rows]}
    if act is not None:
        out["activation"] = {**asdict(act), "median_s": act.median_s, "max_s": act.max_s}
    return out
