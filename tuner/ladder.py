"""Accuracy scaling's arithmetic (Loki): a stage's ladder of variants and the routing shares that give
up the least accuracy while covering a load. Pure functions; ``slipstream.tuner.policy.stage_shares`` decides
when to move (at once down the ladder, back up only once quiet).

A loki plan's stage keeps every variant of its ladder loaded in each replica of its pool
(``slipstream.planner.capacity.ladders``), so a share change is a routing change (``slipstream.streams.shares``), not a
model load. With shares f_v of the stage's items on n replicas, a replica spends f_v / c_v(i) of a
second per request/s on variant v at window i (c_v(i): what one replica serves on v there, the
hand-off's ``window_qps`` per rung), so a mix covers a live envelope r_i when

    load = max_i  r_i x sum_v f_v / (n c_v(i))  <=  1.

The least accuracy given up (sum_v f_v A_v the largest) is found down the *descent* from the plan's
most accurate variant: each next rung serves more per replica and lies on the upper concave hull of
accuracy against time per item (1 / rate_qps), so moving share to it gives up the least accuracy per
capacity gained (a rung below the chord of its neighbours is skipped: mixing them is better). Along
it, Loki's MostAccurateFirst: the share moved from a rung to the next is the smallest that covers
the load at every window, in steps of ``step`` rounded up; only when all of a rung's share has moved
does the next pair start.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

_EPS = 1e-9


@dataclass(frozen=True)
class Rung:
    """One variant of a stage's ladder (the hand-off's ``capacity[].ladder``): its accuracy, the plan's
    share, and what one replica of the stage's pool serves on it, in pipeline requests/s."""

    variant: str
    accuracy: float
    share: float = 0.0  # the plan's share of the stage's items (0: loaded, serving nothing)
    rate_qps: float = 0.0  # what one replica keeps up with
    window_qps: tuple[float, ...] = ()  # per plan window: one replica within the budget (empty: no bound)
    service_ms: tuple[float, ...] = ()  # batch service time by size, on the pool's hardware

    def __post_init__(self) -> None:
        numbers = (self.accuracy, self.share, self.rate_qps, *self.window_qps, *self.service_ms)
        if not all(math.isfinite(x) and x >= 0 for x in numbers):
            raise ValueError(f"ladder rung {self.variant!r}: accuracy, share, rate_qps, window_qps and "
                             f"service_ms must be finite and >= 0")

    @property
    def usable(self) -> bool:
        """Whether shares may move to it: a bound at every window."""
        return self.rate_qps > 0 and bool(self.window_qps) and min(self.window_qps) > 0


Shares = Mapping[str, float]


def accuracy(shares: Shares, ladder: Sequence[Rung]) -> float:
    """The mean accuracy of the stage's items under ``shares``."""
    acc = {r.variant: r.accuracy for r in ladder}
    total = sum(shares.values())
    return sum(f * acc[v] for v, f in shares.items()) / total if total > 0 else 0.0


def mix_load(shares: Shares, ladder: Sequence[Rung], rates: Sequence[float], index: Sequence[int],
             replicas: int) -> float:
    """``max_i r_i sum_v f_v / (n c_v(index[i]))``: <= 1 when ``shares`` on ``replicas`` replicas cover
    the envelope ``rates`` (``index[i]``: the plan window whose capacity sizes window i); inf when a
    variant given a share has no bound."""
    by = {r.variant: r for r in ladder}
    total = sum(shares.values())
    per_item = [0.0] * len(rates)
    for v, f in shares.items():
        if f <= 0:
            continue
        if not by[v].usable:
            return math.inf
        for i in range(len(rates)):
            per_item[i] += f / total / by[v].window_qps[index[i]]
    return max((r * t / replicas for r, t in zip(rates, per_item)), default=0.0)


def descent(ladder: Sequence[Rung], top: str) -> list[Rung]:
    """The rungs shares move down from ``top``: each next one the usable rung, faster per replica,
    that gives up the least accuracy per second of replica time saved (ties: the nearer one)."""
    by = {r.variant: r for r in ladder}
    chain = [by[top]]
    while True:
        at = chain[-1]
        faster = [r for r in ladder if r.usable and r.rate_qps > at.rate_qps * (1 + _EPS)]
        if not faster:
            return chain
        saved = lambda r: 1 / at.rate_qps - 1 / r.rate_qps  # noqa: E731
        chain.append(min(faster, key=lambda r: ((at.accuracy - r.accuracy) / saved(r), -r.accuracy)))


def least_share(a: Rung, c: Rung, rates: Sequence[float], index: Sequence[int], replicas: int
                ) -> float | None:
    """The smallest share f in [0, 1] moved from ``a`` to ``c`` that covers ``rates``: per window,
    (1 - f) x_a + f x_c <= 1 with x = r_i / (n c(i)); None when no f does."""
    lo, hi = 0.0, 1.0
    for i, r in enumerate(rates):
        if r <= 0:
            continue
        xa, xc = r / (replicas * a.window_qps[index[i]]), r / (replicas * c.window_qps[index[i]])
        d = xc - xa
        if d < 0:
            lo = max(lo, (xa - 1) / -d)
        elif d > 0:
            hi = min(hi, (1 - xa) / d)
        elif xa > 1:
            return None
    return lo if lo <= hi + _EPS else None


def covering_shares(ladder: Sequence[Rung], start: Shares, rates: Sequence[float], index: Sequence[int],
                    replicas: int, step: float) -> dict[str, float]:
    """The shares, one per rung (0: loaded, serving nothing), that give up the least accuracy below
    ``start`` (the plan's) and cover ``rates`` on ``replicas`` replicas: ``start`` when it covers;
    else down the :func:`descent` from its most accurate variant, the smallest share (a multiple of
    ``step``, rounded up) moved to the next rung that covers. When nothing covers: whichever of
    ``start`` and the cheapest rung alone is loaded least (the workers drop early what is left)."""
    zero = {r.variant: 0.0 for r in ladder}
    start = {**zero, **start}
    if mix_load(start, ladder, rates, index, replicas) <= 1 + _EPS:
        return start
    acc = {r.variant: r.accuracy for r in ladder}
    top = max((v for v, f in start.items() if f > 0), key=lambda v: (acc[v], v))
    chain = descent(ladder, top) if next(r for r in ladder if r.variant == top).usable else []
    for a, c in zip(chain, chain[1:]):
        f = least_share(a, c, rates, index, replicas)
        if f is not None:
            rounded = min(1.0, math.ceil(f / step - _EPS) * step)
            shares = {**zero, a.variant: 1 - rounded, c.variant: rounded}
            if mix_load(shares, ladder, rates, index, replicas) > 1 + _EPS:  # rounding left the range
                shares = {**zero, a.variant: 1 - f, c.variant: f}
            return {v: round(f, 9) for v, f in shares.items()}
    if not chain:
        return start
    cheapest = {**zero, chain[-1].variant: 1.0}
    return min((start, cheapest), key=lambda s: mix_load(s, ladder, rates, index, replicas))
