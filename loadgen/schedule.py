"""The replay schedule and the sender's lag accounting: pure functions, no clock, no Kafka.

- :func:`build_schedule` turns a trace into what the open-loop sender does: send request ``i`` at
  ``start + offsets_ns[i]``. It is a pure function of ``(trace, seed, rate_scale)``, so a run can be
  repeated exactly and its schedule checked against a snapshot.
- :func:`lag_stats` compares scheduled and actual send times. An open-loop generator that falls behind
  silently turns into a closed-loop one and flatters the system, so the report says whether it kept up.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .workloads import scale_rate

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000
# a sender whose p99 lag exceeds this did not reproduce the trace's burstiness
DEFAULT_LAG_BUDGET_MS = 5.0


@dataclass(frozen=True, eq=False)
class Schedule:
    offsets_ns: np.ndarray  # int64, read-only: send time of request i, ns after the start; sorted
    seed: int
    rate_scale: float

    def __len__(self) -> int:
        return len(self.offsets_ns)

    @property
    def duration_s(self) -> float:
        return int(self.offsets_ns[-1]) / NS_PER_S if len(self.offsets_ns) else 0.0

    def request_id(self, run_id: str, index: int) -> str:
        """Request ids of a run: unique per run, sortable by schedule order."""
        return f"{run_id}-{index:08d}"


def build_schedule(arrivals_s: np.ndarray, *, seed: int, rate_scale: float = 1.0) -> Schedule:
    """Send offsets for a trace, its rate multiplied by ``rate_scale`` on the same timeline
    (:func:`slipstream.loadgen.workloads.scale_rate`, with its own generator seeded by ``seed``)."""
    a = np.asarray(arrivals_s, dtype=float)
    if a.ndim != 1 or (len(a) and (a.min() < 0 or not np.all(np.isfinite(a)))):
        raise ValueError("arrivals must be a 1-D array of finite seconds >= 0")
    a = np.sort(a, kind="stable")
    if rate_scale != 1.0:
        a = scale_rate(a, rate_scale, np.random.default_rng(seed))
    offsets = np.round(a * NS_PER_S).astype(np.int64)
    offsets.flags.writeable = False
    return Schedule(offsets_ns=offsets, seed=seed, rate_scale=rate_scale)


@dataclass(frozen=True)
class LagStats:
    """How far behind its schedule the sender fell (actual - scheduled send time)."""

    sent: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    late_share: float  # share of sends later than the budget
    budget_ms: float
    achieved_qps: float  # sends / (last actual send - first actual send)
    scheduled_qps: float

    @property
    def kept_up(self) -> bool:
        return self.p99_ms <= self.budget_ms

    def verdict(self) -> str:
        if self.sent == 0:
            return "nothing sent"
        if self.kept_up:
            return (f"kept up: p99 send lag {self.p99_ms:.2f} ms <= {self.budget_ms:.1f} ms budget")
        return (f"FELL BEHIND: p99 send lag {self.p99_ms:.1f} ms (max {self.max_ms:.1f} ms) exceeds the "
                f"{self.budget_ms:.1f} ms budget; {100 * self.late_share:.1f}% of sends were late, "
                f"achieved {self.achieved_qps:.1f} of {self.scheduled_qps:.1f} qps: the load was "
                "smoother than the trace, so the latency results may be optimistic")


def lag_stats(scheduled_ns: np.ndarray, actual_ns: np.ndarray, *,
              budget_ms: float = DEFAULT_LAG_BUDGET_MS) -> LagStats:
    """Lag statistics from matching arrays of scheduled and actual send times (same clock)."""
    s = np.asarray(scheduled_ns, dtype=np.int64)
    a = np.asarray(actual_ns, dtype=np.int64)
    if s.shape != a.shape:
        raise ValueError(f"scheduled and actual send times differ in length: {s.shape} vs {a.shape}")
    if len(s) == 0:
        return LagStats(0, 0.0, 0.0, 0.0, 0.0, budget_ms, 0.0, 0.0)
    lag_ms = np.maximum(a - s, 0) / NS_PER_MS  # sending early is not possible, only clock jitter
    p50, p99 = np.percentile(lag_ms, [50, 99])
    return LagStats(
        sent=len(s), p50_ms=float(p50), p99_ms=float(p99), max_ms=float(lag_ms.max()),
        late_share=float(np.mean(lag_ms > budget_ms)), budget_ms=budget_ms,
        achieved_qps=_rate(a), scheduled_qps=_rate(s),
    )


def _rate(times_ns: np.ndarray) -> float:
    span = (int(times_ns.max()) - int(times_ns.min())) / NS_PER_S
    return (len(times_ns) - 1) / span if span > 0 else float("nan")
