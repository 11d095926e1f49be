"""How fast the workers run against what the plan assumed: each stage's *pace*.

The plan's capacity (``slipstream.planner.capacity``, handed over in the ``TunerHandoff``) assumes each batch
takes ``service_ms[b - 1]``, the calibrated latency curve at its size ``b``. On a machine that runs
slower than the hour it was calibrated in (other processes, a slower CPU, cores shared in a burst),
the replicas serve less than that, and a tuner that believes the plan's numbers scales up late. The
pace of a stage is the mean, over its batches that finished in the last ``window_s``, of

    measured service (HopTiming ``finished - started``) / service_ms[b - 1]

(each hop weighs 1 / b, so a batch counts once however many results carry it), read from the
results topic. ``slipstream.tuner.policy`` divides the stage's capacity by it (:meth:`TunerPlan.at_pace`).
It is held to ``[floor, ceiling]``: at 1 by default, a fast hour never makes the tuner trust the
replicas beyond what the plan was sized for (going below the plan's cost is the planner's call), and
a ceiling bounds what a wrong measurement can add. Fewer than ``min_batches`` batches say nothing:
the stage's pace is then 1.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Mapping

NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class PaceConfig:
    window_s: float = 10.0
    min_batches: float = 10.0
    floor: float = 1.0
    ceiling: float = 3.0

    def __post_init__(self) -> None:
        if not (self.window_s > 0 and self.min_batches > 0 and 0 < self.floor <= self.ceiling):
            raise ValueError(f"invalid pace config: {self}")


Expected = Mapping[str, Mapping[str, tuple[float, ...]]]  # stage -> variant -> service_ms by batch size


def expected_service(plan) -> Expected:
    """What a plan's capacity assumes per stage and variant (``TunerPlan`` stages with ``service_ms``;
    a stage's ladder adds each of its variants, so its pace is measured whichever serves)."""
    return {s.stage: {**{r.variant: r.service_ms for r in s.ladder if r.service_ms}, s.variant: s.service_ms}
            for s in plan.stages if s.service_ms}


def hop_ratios(result: Mapping, expected: Expected) -> list[tuple[str, int, float, float]]:
    """``(stage, finished_ns, measured / expected, weight 1/b)`` for each hop of an InferenceResult
    whose stage and variant ``expected`` covers at its batch size."""
    out = []
    for h in result.get("hops") or ():
        exp = expected.get(h["stage"], {}).get(h["variant"])
        b = int(h["batch_size"])
        if exp is None or not 1 <= b <= len(exp) or not exp[b - 1] > 0:
            continue
        took_ms = (int(h["finished_ns"]) - int(h["started_ns"])) / 1e6
        if took_ms >= 0:
            out.append((h["stage"], int(h["finished_ns"]), took_ms / exp[b - 1], 1.0 / b))
    return out


class PaceTracker:
    """Batch ratios per stage, kept for ``window_s`` with their running sums (a tick reads the pace
    in time independent of the rate); :meth:`pace` reads them."""

    def __init__(self, config: PaceConfig = PaceConfig()) -> None:
        self.config = config
        self._ratios: dict[str, deque[tuple[int, float, float]]] = {}
        self._sums: dict[str, list[float]] = {}  # stage -> [sum of weights, sum of ratio x weight]
        self._read: deque[tuple[int, dict[str, float]]] = deque()  # read()'s paces, and when

    def add(self, result: Mapping, expected: Expected) -> None:
        for stage, at_ns, ratio, weight in hop_ratios(result, expected):
            self._ratios.setdefault(stage, deque()).append((at_ns, ratio, weight))
            sums = self._sums.setdefault(stage, [0.0, 0.0])
            sums[0] += weight
            sums[1] += ratio * weight

    def pace(self, now_ns: int) -> dict[str, float]:
        """Each stage's pace over the batches that finished after ``now - window_s`` (results come
        in about the order their hops finished); stages with too few batches are left out (pace 1)."""
        c, out = self.config, {}
        start = now_ns - int(c.window_s * NS_PER_S)
        for stage, q in self._ratios.items():
            sums = self._sums[stage]
            while q and q[0][0] <= start:
                _, ratio, weight = q.popleft()
                sums[0] -= weight
                sums[1] -= ratio * weight
            if not q:
                sums[0] = sums[1] = 0.0  # no rounding left behind
            elif sums[0] >= c.min_batches - 1e-9:
                out[stage] = min(c.ceiling, max(c.floor, sums[1] / sums[0]))
        return out

    def read(self, now_ns: int, horizon_s: float) -> tuple[dict[str, float], dict[str, float]]:
        """(:meth:`pace` now, :meth:`peak` over the last ``horizon_s`` with this reading)."""
        now = self.pace(now_ns)
        self._read.append((now_ns, now))
        return now, self.peak(now_ns, horizon_s)

    def peak(self, now_ns: int, horizon_s: float) -> dict[str, float]:
        """Per stage, the highest pace :meth:`read` read in the last ``horizon_s`` (a stage it never
        read: left out, pace 1)."""
        start = now_ns - int(horizon_s * NS_PER_S)
        while self._read and self._read[0][0] <= start:
            self._read.popleft()
        out: dict[str, float] = {}
        for _, paces in self._read:
            for stage, p in paces.items():
                out[stage] = max(p, out.get(stage, p))
        return out
