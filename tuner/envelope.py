"""Traffic envelopes (InferLine / network calculus): the most arrivals seen in any window of each size.

One core, two users. :class:`EnvelopeTracker` keeps the live envelope of the input topic's arrival
timestamps; :func:`envelope` is the batch function the planner uses for the sample trace, and it is
literally a fresh tracker fed the whole trace, so both run :func:`_window_counts`.

How the tracker counts. Arrivals arrive in chunks (whatever one Kafka fetch returned). For window ``w``
the count of the window ending at arrival ``t`` is ``#{arrivals in (t - w, t]}`` = its index in the
sorted buffer minus ``searchsorted(buffer, t - w, side="right")``. The maximum over every placement of a
window of length ``w`` is always reached by a window ending at an arrival, so these counts are exact.
Cost per arrival: one vectorised binary search per window (``O(W log N)`` in C, N = arrivals in the
largest window) plus an amortised O(1) append into a ring buffer that keeps only the last ``max(w)``
seconds; the Python overhead is paid once per chunk. ``slipstream bench tuner`` measures it.

Three views of the counts (all as rates = count / window):

- ``lifetime``: the max since the tracker started (what :func:`envelope` returns for a sample trace).
- ``recent``: the max over windows *ending* in the last ``T`` seconds before ``now`` (scale-up looks at
  a short ``T``, scale-down at the peak 5 s rate over the last 30 s). Kept as per-bucket maxima
  (``bucket_s``, default 0.5 s) so the horizon slides and decays to zero when traffic stops; a horizon
  is rounded up to whole buckets, which can only make the tuner more conservative.

Out-of-order timestamps (several partitions interleave) are held back for ``reorder_s`` and sorted;
anything older than what was already counted is counted at the newest counted time (``late`` says
how many), which can only overstate a burst, never hide one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

NS_PER_S = 1_000_000_000
MAX_WINDOW_S = 60.0
CHUNK = 1 << 16


def doubling_windows(service_time_s: float, max_window_s: float = MAX_WINDOW_S) -> tuple[float, ...]:
    """InferLine's windows: the service time, doubled while it stays within ``max_window_s``."""
    if not service_time_s > 0:
        raise ValueError(f"service_time_s must be > 0, got {service_time_s}")
    if service_time_s > max_window_s:
        raise ValueError(f"service_time_s ({service_time_s}) exceeds max_window_s ({max_window_s})")
    out = []
    w = service_time_s
    while w <= max_window_s * (1 + 1e-12):
        out.append(w)
        w *= 2.0
    return tuple(out)


def _window_counts(buf: np.ndarray, first_new: int, windows_ns: np.ndarray) -> np.ndarray:
    """Counts of the windows ending at each of ``buf[first_new:]``; shape (len(windows), new arrivals).

    ``buf`` is sorted and holds at least the largest window's worth of arrivals before ``first_new``.
    """
    new = buf[first_new:]
    ends = np.arange(first_new + 1, len(buf) + 1, dtype=np.int64)
    starts = np.searchsorted(buf, new[None, :] - windows_ns[:, None], side="right")
    return ends[None, :] - starts


@dataclass(frozen=True)
class EnvelopeSnapshot:
    """Rates per window, as the tuner policy reads them (all in queries per second)."""

    windows_s: tuple[float, ...]
    rates_qps: tuple[float, ...]

    def rate(self, window_s: float) -> float:
        for w, r in zip(self.windows_s, self.rates_qps):
            if math.isclose(w, window_s, rel_tol=1e-9):
                return r
        raise KeyError(f"no window of {window_s} s in {self.windows_s}")


class EnvelopeTracker:
    """Live envelope over a fixed set of window sizes; see the module docstring."""

    def __init__(self, windows_s: Sequence[float], *, bucket_s: float = 0.5,
                 recent_horizon_s: float = 60.0, reorder_s: float = 0.0) -> None:
        ws = sorted({float(w) for w in windows_s})
        if not ws or ws[0] <= 0:
            raise ValueError(f"windows_s must be positive, got {list(windows_s)}")
        if bucket_s <= 0 or recent_horizon_s <= 0 or reorder_s < 0:
            raise ValueError("bucket_s and recent_horizon_s must be > 0 and reorder_s >= 0")
        self.windows_s = tuple(ws)
        self._windows_ns = np.array([int(round(w * NS_PER_S)) for w in ws], dtype=np.int64)
        self._bucket_ns = int(round(bucket_s * NS_PER_S))
        self._recent_buckets = int(math.ceil(recent_horizon_s / bucket_s)) + 1
        self._reorder_ns = int(round(reorder_s * NS_PER_S))
        self._buf = np.empty(1024, dtype=np.int64)  # ring: live part is _buf[_lo:_hi], sorted
        self._lo = self._hi = 0
        self._pending: list[np.ndarray] = []
        self._newest_seen = np.iinfo(np.int64).min
        self._lifetime = np.zeros(len(ws), dtype=np.int64)
        # per-bucket maxima: bucket index -> counts per window (dict keeps insertion order = time)
        self._buckets: dict[int, np.ndarray] = {}
        self.arrivals = 0
        self.late = 0

    # ---- feeding

    def add(self, timestamps_ns: np.ndarray | Sequence[int]) -> None:
        """Add arrivals (epoch ns, any order); counts those older than the reorder hold-back."""
        ts = np.asarray(timestamps_ns, dtype=np.int64)
        if ts.size == 0:
            return
        self._pending.append(ts)
        self._newest_seen = max(self._newest_seen, int(ts.max()))
        self._count_up_to(self._newest_seen - self._reorder_ns)

    def flush(self) -> None:
        """Count everything held back (end of a trace)."""
        self._count_up_to(np.iinfo(np.int64).max)

    def _count_up_to(self, watermark_ns: int) -> None:
        if not self._pending:
            return
        held = np.concatenate(self._pending) if len(self._pending) > 1 else self._pending[0]
        ready = held[held <= watermark_ns]
        rest = held[held > watermark_ns]
        self._pending = [rest] if rest.size else []
        if ready.size == 0:
            return
        ready = np.sort(ready)
        if self._hi > self._lo:
            newest = self._buf[self._hi - 1]
            too_old = ready < newest
            if too_old.any():
                self.late += int(too_old.sum())
                ready = np.sort(np.maximum(ready, newest))
        self._ingest(ready)

    def _ingest(self, ready: np.ndarray) -> None:
        self._trim(int(ready[0]) - int(self._windows_ns[-1]))
        first_new = self._append(ready) - self._lo
        counts = _window_counts(self._buf[self._lo:self._hi], first_new, self._windows_ns)
        self._lifetime = np.maximum(self._lifetime, counts.max(axis=1))
        self._record_buckets(ready, counts)
        self.arrivals += int(ready.size)

    def _record_buckets(self, ts: np.ndarray, counts: np.ndarray) -> None:
        bucket = ts // self._bucket_ns
        cut = np.flatnonzero(np.diff(bucket)) + 1
        starts = np.concatenate(([0], cut))
        maxima = np.maximum.reduceat(counts, starts, axis=1)
        for j, b in enumerate(bucket[starts].tolist()):
            old = self._buckets.get(b)
            self._buckets[b] = maxima[:, j] if old is None else np.maximum(old, maxima[:, j])
        oldest_kept = int(bucket[-1]) - self._recent_buckets
        while self._buckets:
            first = next(iter(self._buckets))
            if first >= oldest_kept:
                break
            del self._buckets[first]

    def _trim(self, older_than_ns: int) -> None:
        """Forget arrivals that no window ending at or after ``older_than_ns + max window`` can see."""
        live = self._buf[self._lo:self._hi]
        self._lo += int(np.searchsorted(live, older_than_ns, side="right"))

    def _append(self, ts: np.ndarray) -> int:
        """Append sorted ``ts`` after the live part; returns the absolute index of the first one."""
        n_live = self._hi - self._lo
        if self._hi + ts.size > self._buf.size:
            cap = self._buf.size
            while n_live + ts.size > cap // 2:
                cap *= 2
            fresh = np.empty(cap, dtype=np.int64) if cap != self._buf.size else self._buf
            fresh[:n_live] = self._buf[self._lo:self._hi]  # overlapping move is fine: lo >= 0
            self._buf, self._lo, self._hi = fresh, 0, n_live
        self._buf[self._hi:self._hi + ts.size] = ts
        first = self._hi
        self._hi += ts.size
        return first

    # ---- reading

    def lifetime(self) -> EnvelopeSnapshot:
        """Max rate per window since the tracker started."""
        return self._snapshot(self._lifetime)

    def recent(self, now_ns: int, horizon_s: float) -> EnvelopeSnapshot:
        """Max rate per window over windows ending in the last ``horizon_s`` before ``now_ns``
        (rounded out to whole buckets); zero when nothing arrived in that time."""
        first_bucket = (now_ns - int(round(horizon_s * NS_PER_S))) // self._bucket_ns
        best = np.zeros(len(self.windows_s), dtype=np.int64)
        for b, counts in reversed(self._buckets.items()):
            if b < first_bucket:
                break
            np.maximum(best, counts, out=best)
        return self._snapshot(best)

    def _snapshot(self, counts: np.ndarray) -> EnvelopeSnapshot:
        rates = counts / (self._windows_ns / NS_PER_S)
        return EnvelopeSnapshot(self.windows_s, tuple(float(r) for r in rates))


def envelope(arrivals_s: np.ndarray, windows_s: Sequence[float]) -> np.ndarray:
    """Max arrival rate (queries/s) in any window of each size, for a whole trace (arrival times in
    seconds, any order). Returned in the order of ``windows_s``. Runs the live tracker's code."""
    arr = np.sort(np.asarray(arrivals_s, dtype=np.float64))
    tracker = EnvelopeTracker(windows_s)
    ns = np.round(arr * NS_PER_S).astype(np.int64)
    for i in range(0, ns.size, CHUNK):  # chunks bound the (windows x chunk) count matrix
        tracker.add(ns[i:i + CHUNK])
    tracker.flush()
    snap = tracker.lifetime()
    return np.array([snap.rate(float(w)) for w in windows_s], dtype=np.float64)
