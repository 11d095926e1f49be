"""How fast the workers run against what the plan assumed: each stage's *pace*.

The plan's capacity (``slipstream.planner.capacity``, handed over in the ``TunerHandoff``) assumes each batch
takes ``service_ms[b - 1]``, the calibrated latency curve at its size ``b``. On a machine that runs
slower than the hour it was calibrated in (other processes, a slower CPU, cores shared in a burst),
the replicas serve less than that, and a tuner that believes the plan's numbers scales up late. The
pace of a stage is the higher of two means, over its batches that finished in the last ``window_s``
and in the last ``rise_s``, of

    measured service (HopTiming ``finished - started``) / service_ms[b - 1]

(each hop weighs 1 / b, so a batch counts once however many results carry it), read from the
results topic: it rises within ``rise_s`` and falls over ``window_s`` (a second replica on shared
cores slows every batch at once; docs/tuner.md, "At the machine's pace"). ``slipstream.tuner.policy``
divides the stage's capacity by it (:meth:`TunerPlan.at_pace`).
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
    rise_s: float = 2.0  # the pace rises within this, falls over window_s (each mean needs min_batches)
    min_batches: float = 10.0
    floor: float = 1.0
    ceiling: float = 3.0

    def __post_init__(self) -> None:
        if not (0 < self.rise_s <= self.window_s and self.min_batches > 0 and 0 < self.floor <= self.ceiling):
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


class _Mean:
    """The weighted mean ratio of the batches that finished in the last ``window_s``, with its running
    sums (a tick reads it in time independent of the rate)."""

    def __init__(self, window_s: float) -> None:
        self.window_ns = int(window_s * NS_PER_S)
        self.batches: deque[tuple[int, float, float]] = deque()
        self.weight = self.total = 0.0  # sum of weights, sum of ratio x weight

    def add(self, at_ns: int, ratio: float, weight: float) -> None:
        self.batches.append((at_ns, ratio, weight))
        self.weight += weight
        self.total += ratio * weight

    def mean(self, now_ns: int, min_batches: float) -> float | None:
        while self.batches and self.batches[0][0] <= now_ns - self.window_ns:
            _, ratio, weight = self.batches.popleft()
            self.weight -= weight
            self.total -= ratio * weight
        if not self.batches:
            self.weight = self.total = 0.0  # no rounding left behind
        return self.total / self.weight if self.weight >= min_batches - 1e-9 else None


class PaceTracker:
    """Batch ratios per stage over ``window_s`` and ``rise_s``; :meth:`pace` reads them."""

    def __init__(self, config: PaceConfig = PaceConfig()) -> None:
        self.config = config
        self._means: dict[str, tuple[_Mean, _Mean]] = {}  # stage -> (over window_s, over rise_s)
        self._read: deque[tuple[int, dict[str, float]]] = deque()  # read()'s paces, and when

    def add(self, result: Mapping, expected: Expected) -> None:
        c = self.config
        for stage, at_ns, ratio, weight in hop_ratios(result, expected):
            for m in self._means.setdefault(stage, (_Mean(c.window_s), _Mean(c.rise_s))):
                m.add(at_ns, ratio, weight)

    def pace(self, now_ns: int) -> dict[str, float]:
        """Each stage's pace: the higher mean of its batches that finished after ``now - window_s``
        and after ``now - rise_s`` (results come in about the order their hops finished); stages
        with too few batches in both are left out (pace 1)."""
        c, out = self.config, {}
        for stage, means in self._means.items():
            found = [m for m in (x.mean(now_ns, c.min_batches) for x in means) if m is not None]
            if found:
                out[stage] = min(c.ceiling, max(c.floor, max(found)))
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
