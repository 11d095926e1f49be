"""What the estimator returns: per-request results as arrays, and the summaries read from them.

Drops count as infinitely late in the percentiles, so ``p99_ms <= SLO`` and ``attainment >= 0.99``
say the same thing; ``p99_completed_ms`` is the p99 of the requests that finished.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..streams.batching import drop_reason


@dataclass(frozen=True)
class QueryResult:
    request: int
    arrival_s: float
    latency_ms: float | None  # None when dropped
    dropped: bool
    reason: str
    stage_ms: dict[str, float]  # per stage: longest residence (queue + batch) of the request's items


@dataclass(frozen=True, eq=False)
class SimResult:
    slo_ms: float
    stage_names: tuple[str, ...]
    arrival_s: np.ndarray
    latency_ms: np.ndarray  # NaN when dropped
    dropped: np.ndarray  # bool
    drop_stage: np.ndarray  # stage index of the first drop, -1 when not dropped
    drop_info_ns: np.ndarray  # (deadline, now, predicted batch-1) of the first drop, per request
    stage_ms: np.ndarray  # [requests, stages] longest residence; NaN where not visited
    batches: int
    events: int
    shed: np.ndarray | None = None  # bool: shed by the source's gate (``slipstream.planner.sim.gate``); None: none

    @property
    def requests(self) -> int:
        return int(self.arrival_s.size)

    def _lat_inf(self) -> np.ndarray:
        return np.where(self.dropped, np.inf, self.latency_ms)

    def percentile_ms(self, q: float) -> float:
        """Latency percentile with dropped requests counted as infinitely late."""
        return nearest_rank(self._lat_inf(), q)

    @property
    def p50_ms(self) -> float:
        return self.percentile_ms(50)

    @property
    def p99_ms(self) -> float:
        return self.percentile_ms(99)

    @property
    def p99_completed_ms(self) -> float:
        done = self.latency_ms[~self.dropped]
        return nearest_rank(done, 99) if done.size else math.inf

    @property
    def attainment(self) -> float:
        if not self.requests:
            return 1.0
        ok = (~self.dropped) & (self.latency_ms <= self.slo_ms + 1e-9)
        return float(ok.mean())

    @property
    def drop_rate(self) -> float:
        return float(self.dropped.mean()) if self.requests else 0.0

    @property
    def shed_share(self) -> float:
        """The share of requests the source's gate shed."""
        return float(self.shed.mean()) if self.shed is not None and self.requests else 0.0

    def meets_slo(self, percentile: float = 99.0) -> bool:
        return self.attainment >= percentile / 100.0

    def reason(self, i: int) -> str:
        """Why request ``i`` was dropped, as the workers say it ("" when it was not)."""
        if not self.dropped[i]:
            return ""
        d, now, pred = (int(x) for x in self.drop_info_ns[i])
        why = (f"shed: no time left before the deadline at the capacity in force ({(d - now) / 1e6:.0f} ms left)"
               if self.shed is not None and self.shed[i] else drop_reason(d, now, pred))
        return f"stage {self.stage_names[self.drop_stage[i]]}: {why}"

    def query(self, i: int) -> QueryResult:
        reason = self.reason(i)
        return QueryResult(i, float(self.arrival_s[i]),
                           None if self.dropped[i] else float(self.latency_ms[i]), bool(self.dropped[i]),
                           reason, {s: float(v) for s, v in zip(self.stage_names, self.stage_ms[i])
                                    if not np.isnan(v)})


LATE = "drops = late"  # the label of every end-to-end percentile: not done counts as infinitely late


def nearest_rank(values: np.ndarray, q: float) -> float:
    """The q-th percentile by nearest rank (no interpolation, so infinities stay infinite)."""
    if values.size == 0:
        return 0.0
    v = np.sort(values)
    return float(v[max(0, math.ceil(q / 100.0 * v.size) - 1)])


