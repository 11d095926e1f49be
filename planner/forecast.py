"""Forecast the next planning interval's peak arrival rate from recent arrival timestamps.

Rule (pure numpy, documented in docs/planner.md): split the last ``lookback_intervals`` intervals of
``interval_s`` seconds; in each, take the peak rate over a sliding ``window_s`` window; the forecast
is ``growth`` x the largest of those peaks, at least ``floor_qps``. Planning for a recent peak rather
than the last mean is what IPA's LSTM (max over the next 20 s) and Loki's headroom aim at. The window
is the interval (10 s) by default: bursts shorter than that are the tuner's, which adds replicas of
the plan in place within a second of seeing them, while the estimator still replays the recent sample
with its bursts. Sized for the busiest second instead (``window_s=1``), a CV² = 4 trace's re-plans
asked for 2.7x its mean rate, found only plans on other variants and hardware, and swapped models at
the start of the next burst (docs/results.md).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..streams.arrivals import peak_rate_sliding


@dataclass(frozen=True)
class ForecastSettings:
    interval_s: float = 10.0
    lookback_intervals: int = 6
    window_s: float = 10.0  # the busiest interval's mean; 1.0: the busiest second
    growth: float = 1.1
    floor_qps: float = 1.0

    def __post_init__(self) -> None:
        if self.interval_s <= 0 or self.window_s <= 0 or self.lookback_intervals < 1 or self.growth <= 0:
            raise ValueError(f"forecast settings out of range: {self}")


def interval_peaks(arrivals_s: np.ndarray, now_s: float, s: ForecastSettings) -> list[float]:
    """Each interval's peak rate; the window is no longer than the history seen up to the interval's
    end (at least 1 s): counts over time before the first arrival would understate a fresh start."""
    a = np.sort(np.asarray(arrivals_s, dtype=float))
    first = a[0] if a.size else now_s
    peaks = []
    for i in range(s.lookback_intervals):
        hi = now_s - i * s.interval_s
        lo = hi - s.interval_s
        seg = a[(a >= lo) & (a < hi)]
        peaks.append(peak_rate_sliding(seg, min(s.window_s, s.interval_s, max(hi - first, 1.0))))
    return peaks


def forecast_peak(arrivals_s: np.ndarray, now_s: float, s: ForecastSettings = ForecastSettings()) -> float:
    """The rate (qps) to plan the next interval for."""
    return max(s.floor_qps, s.growth * max(interval_peaks(arrivals_s, now_s, s)))
