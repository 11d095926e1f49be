"""Batch latency models, shared by the planner (profiles, estimator) and the agents (early drops).

- :class:`LatencyCurve` is the profile of one (variant, hardware): measured high-percentile latency per
  batch size, with a fit for sizes not measured (IPA: quadratic in batch size, linear fallback).
- :class:`RecentLatency` is Clockwork's predictor: a high percentile over the last few runs of each
  batch size, seeded from the curve, so a worker's predictions follow what its hardware does now. A
  lone stall (one run far slower than its size's recent median) counts only once the next run of its
  size confirms it, and a size idle for a second forgets its runs.
"""
from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

NS_PER_MS = 1_000_000
FIT_DIGITS = 10  # significant digits kept of a latency curve's fitted coefficients


def _rounded(coeffs) -> tuple[float, ...]:
    return tuple(float(f"{c:.{FIT_DIGITS}g}") for c in coeffs)


@dataclass(frozen=True)
class LatencyCurve:
    points_ms: Mapping[int, float]  # measured latency (a high percentile) per batch size
    coeffs: tuple[float, float, float]  # l(b) = c2*b^2 + c1*b + c0, in ms
    kind: str = "quadratic"  # quadratic | linear | constant

    @classmethod
    def fit(cls, points_ms: Mapping[int, float]) -> "LatencyCurve":
        """Least-squares fit: quadratic when 3+ sizes are measured and the fit is non-decreasing over
        the measured range, else linear (2+ sizes), else constant.

        The coefficients are rounded to :data:`FIT_DIGITS` significant digits: the least-squares solve
        runs in the machine's BLAS, whose kernels differ in the last bits from one CPU to another, and
        a prediction must not depend on which kernel ran it."""
        if not points_ms:
            raise ValueError("a latency curve needs at least one measured batch size")
        pts = {int(b): float(v) for b, v in points_ms.items()}
        bs = np.array(sorted(pts), dtype=float)
        ls = np.array([pts[int(b)] for b in bs])
        if len(bs) >= 3:
            c2, c1, c0 = _rounded(np.polyfit(bs, ls, 2))
            grid = np.linspace(1, max(bs.max(), 1) * 2, 64)
            if c2 >= 0 and np.all(np.diff(c2 * grid**2 + c1 * grid + c0) >= -1e-9):
                return cls(pts, (float(c2), float(c1), float(c0)), "quadratic")
        if len(bs) >= 2:
            c1, c0 = _rounded(np.polyfit(bs, ls, 1))
            if c1 >= 0:
                return cls(pts, (0.0, float(c1), float(c0)), "linear")
        return cls(pts, (0.0, 0.0, float(ls.max())), "constant")

    def ms(self, batch: int) -> float:
        if batch in self.points_ms:
            return self.points_ms[batch]
        c2, c1, c0 = self.coeffs
        fitted = c2 * batch * batch + c1 * batch + c0
        # never predict faster than a measured smaller batch
        floor = max((v for b, v in self.points_ms.items() if b <= batch), default=0.0)
        return max(fitted, floor, 1e-3)

    def ns(self, batch: int) -> int:
        return int(self.ms(batch) * NS_PER_MS)

    def throughput_qps(self, batch: int) -> float:
        """Single-replica throughput at this batch size, back to back."""
        return batch / (self.ms(batch) / 1000.0)


PREDICT_WINDOW = 10  # RecentLatency: the last runs per batch size it keeps
PREDICT_PERCENTILE = 99.0  # ... and the percentile of them it predicts (the estimator mirrors both)
# ... of the runs of the last PREDICT_HORIZON_S seconds. Without a horizon one stalled run past the
# SLO (say 428 ms against 400 ms) would have every later request dropped as certain to be late, so
# nothing would run again to correct it and the stage would answer nothing.
PREDICT_HORIZON_S = 5.0
# ... and once a size has not run for PREDICT_IDLE_S, its runs are forgotten (the scaled profile speaks
# again). A stage whose predictions call every queued request late runs nothing, so nothing corrects
# them: a slow second on a busy host (lite2 at 394 and 682 ms while the planner solved) otherwise
# dropped every request for the whole horizon. After this long the stage tries again; if the host is
# still slow the first run says so.
PREDICT_IDLE_S = 1.0
# A run over STALL_FACTOR x the median of its size's recent runs is a stall (a preempted thread, a
# page fault, a neighbour's burst) until the next run of the same size is as slow. Taken for the pace
# at once, one stall drops every queued request for the horizon: on a 2-core host one 388-577 ms run of
# lite0 (median 34 ms, the slowest of its last ten 161-210 ms) dropped 165-173 requests in each of
# three runs. The factor sits above that host's ordinary tail (5-6x the median).
STALL_FACTOR = 8.0
STALL_MIN_RUNS = 3  # fewer recent runs of a size: the median is the scaled profile's latency


@dataclass
class RecentLatency:
    """p-th percentile of the last ``window`` observed latencies per batch size (Clockwork), of the
    runs of the last ``horizon_s`` on ``clock`` (epoch or simulated ns; None: no horizon), none once the
    size has not run for ``idle_s``.

    Before a size has been seen (or when its runs are all older than the horizon), the curve's value
    is scaled by how the runs seen so far compare with the curve (the median ratio), so a
    slower-than-profiled machine is noticed at once. A run over :data:`STALL_FACTOR` x the median of
    its size's recent runs is held back until the next run of its size is as slow (then both count);
    a faster next run discards it.
    """

    curve: LatencyCurve
    window: int = PREDICT_WINDOW
    percentile: float = PREDICT_PERCENTILE
    clock: Callable[[], int] | None = field(default=None, compare=False, repr=False)
    horizon_s: float = PREDICT_HORIZON_S
    idle_s: float = PREDICT_IDLE_S
    _recent: dict[int, deque] = field(default_factory=dict)  # batch -> (at_ns, latency_ns) of its runs
    _ratios: deque = field(default_factory=lambda: deque(maxlen=32))
    _stalls: dict[int, tuple[int, int]] = field(default_factory=dict)  # batch -> its unconfirmed stall
    # the median of _ratios, computed once per observation when asked (a cache: not compared or shown)
    _scale: float | None = field(default=None, compare=False, repr=False)

    def observe(self, batch: int, latency_ns: int) -> None:
        at = self.clock() if self.clock is not None else 0
        stall = self._stalls.pop(batch, None)
        if latency_ns > STALL_FACTOR * self._median_ns(batch):
            if stall is None:
                self._stalls[batch] = (at, latency_ns)  # held back until the next run of this size
                return
            self._record(batch, *stall)  # confirmed: both runs are the pace now
        self._record(batch, at, latency_ns)

    def _record(self, batch: int, at: int, latency_ns: int) -> None:
        self._recent.setdefault(batch, deque(maxlen=self.window)).append((at, latency_ns))
        self._ratios.append(latency_ns / max(self.curve.ns(batch), 1))
        self._scale = None

    def predict_ns(self, batch: int) -> int:
        vals = self._runs_ns(batch)
        if not vals:
            return self._profiled_ns(batch)
        k = min(len(vals) - 1, math.ceil(self.percentile / 100.0 * len(vals)) - 1)
        return vals[max(k, 0)]

    def _runs_ns(self, batch: int) -> list[int]:
        """The latencies of this size's runs within the horizon, sorted (the expired ones are forgotten,
        and all of them once the newest is ``idle_s`` old)."""
        seen = self._recent.get(batch)
        if not seen:
            return []
        if self.clock is not None:  # runs are in time order: the expired ones lead
            now = self.clock()
            if now - seen[-1][0] > self.idle_s * 1e9:
                seen.clear()
            since = now - int(self.horizon_s * 1e9)
            while seen and seen[0][0] < since:
                seen.popleft()
        return sorted(lat for _, lat in seen)

    def _median_ns(self, batch: int) -> float:
        vals = self._runs_ns(batch)
        return statistics.median(vals) if len(vals) >= STALL_MIN_RUNS else self._profiled_ns(batch)

    def _profiled_ns(self, batch: int) -> int:
        """The curve's latency scaled by the median ratio of the runs seen to the curve."""
        if self._scale is None:
            self._scale = float(statistics.median(self._ratios)) if self._ratios else 1.0  # = np.median, 20x faster
        return int(self.curve.ns(batch) * self._scale)
