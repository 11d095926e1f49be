"""The batching and early-drop policy: one pure module run by both the stage agents and the estimator.

What a stage worker does, exactly (the simulator in ``slipstream.planner.estimator`` replays the same steps):

1. Arrivals join the worker's FIFO queue (its assigned partitions, in fetch order).
2. A window is taken when :func:`ready` says so: the queue holds ``max_batch`` items, or the oldest
   queued item has waited ``batch_timeout`` since it arrived (Clockwork-style: the timer starts at the
   oldest request, not at the previous flush as faust's ``Stream.take`` does). The window is the first
   ``min(queued, max_batch)`` items (:func:`window_size`).
3. The window is worked off in sub-batches. :func:`decide` drops every request that cannot finish by
   its deadline even in a batch of one (a ``dropped`` result with a reason, never a late answer), then
   runs the largest FIFO prefix whose earliest deadline the predicted batch latency still meets; the
   rest is deferred to the next sub-batch, decided again at the new time. :func:`whole_ns` is its
   common case (the whole window runs as one batch) on its own, for loops that need no ``Decision``.
4. Only when the whole window is done (every output produced) are its input offsets committed.

A new ``BatchSettings`` (hot reconfiguration) is read only at step 2, i.e. at a batch boundary.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

NS_PER_MS = 1_000_000


@dataclass(frozen=True)
class BatchSettings:
    max_batch: int
    batch_timeout_ns: int
    drop_late: bool = True  # False only for baselines that measure what happens without early drops

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {self.max_batch}")
        if self.batch_timeout_ns < 0:
            raise ValueError(f"batch_timeout_ns must be >= 0, got {self.batch_timeout_ns}")

    @classmethod
    def from_ms(cls, max_batch: int, batch_timeout_ms: float, drop_late: bool = True) -> "BatchSettings":
        return cls(max_batch, int(round(batch_timeout_ms * NS_PER_MS)), drop_late)


class Decision(NamedTuple):
    run: tuple[int, ...]  # window indices to run now, FIFO order
    drop: tuple[int, ...]  # window indices that cannot meet their deadline
    defer: tuple[int, ...]  # window indices left for the next sub-batch
    predicted_ns: int  # predicted latency of the `run` batch (0 when nothing runs)
    finish_ns: int  # now + predicted_ns


def ready(queued: int, oldest_arrival_ns: int | None, now_ns: int, s: BatchSettings) -> bool:
    """Whether a window should be taken now."""
    if queued <= 0 or oldest_arrival_ns is None:
        return False
    return queued >= s.max_batch or now_ns >= flush_due_ns(oldest_arrival_ns, s)


def flush_due_ns(oldest_arrival_ns: int, s: BatchSettings) -> int:
    """When the batch timeout of the oldest queued item expires."""
    return oldest_arrival_ns + s.batch_timeout_ns


def window_size(queued: int, s: BatchSettings) -> int:
    return min(queued, s.max_batch)


def whole_ns(deadlines_ns: Sequence[int], now_ns: int, predict_ns: Callable[[int], int], s: BatchSettings) -> int:
    """:func:`decide`'s common case on its own, with no ``Decision`` built: the predicted latency when
    the whole (non-empty) window runs as one batch, nothing dropped or deferred; -1 when it does not."""
    lat = predict_ns(len(deadlines_ns))
    if not s.drop_late:
        return lat
    earliest = min(deadlines_ns)
    if earliest >= now_ns + lat and earliest >= now_ns + predict_ns(1):
        return lat
    return -1


def decide(deadlines_ns: Sequence[int], now_ns: int, predict_ns: Callable[[int], int],
           s: BatchSettings) -> Decision:
    """Split a FIFO window into (run, drop, defer) given each item's deadline and a latency predictor.

    ``predict_ns(b)`` is the predicted latency of a batch of ``b`` (a high percentile, see
    ``slipstream.streams.latency``) and must be non-decreasing in ``b``.
    """
    n = len(deadlines_ns)
    if n == 0:
        return Decision((), (), (), 0, now_ns)
    lat = whole_ns(deadlines_ns, now_ns, predict_ns, s)
    if lat >= 0:  # nothing doomed, all fits: the common case
        return Decision(tuple(range(n)), (), (), lat, now_ns + lat)
    alone = now_ns + predict_ns(1)
    drop = tuple(i for i, d in enumerate(deadlines_ns) if d < alone)
    live = [i for i, d in enumerate(deadlines_ns) if d >= alone]
    if not live:
        return Decision((), drop, (), 0, now_ns)
    # largest prefix whose earliest deadline is met; b=1 always qualifies by construction
    earliest = []
    m = deadlines_ns[live[0]]
    for i in live:
        d = deadlines_ns[i]
        if d < m:
            m = d
        earliest.append(m)
    for b in range(len(live), 0, -1):
        lat = predict_ns(b)
        if earliest[b - 1] >= now_ns + lat:
            return Decision(tuple(live[:b]), drop, tuple(live[b:]), lat, now_ns + lat)
    raise AssertionError("unreachable: a batch of one always fits")  # pragma: no cover


def drop_reason(deadline_ns: int, now_ns: int, predicted_ns: int) -> str:
    """The reason text of a deadline drop, shared so results read the same from agents and simulator."""
    return (f"deadline: predicted finish {(now_ns + predicted_ns - deadline_ns) / NS_PER_MS:.1f} ms "
            f"after the deadline (batch-1 latency {predicted_ns / NS_PER_MS:.1f} ms)")


def served_within(window_ns: int, budget_ns: int, batch: int, batch_ns: int, timeout_ns: int) -> int:
    """Items ONE replica can take of arrivals within a window of ``window_ns``, each served within
    ``budget_ns`` of its arrival (a network-calculus service curve at ``window + budget``).

    From the start of a backlog a replica takes a window within ``timeout_ns`` (:func:`ready`: the
    oldest item's timeout, or at once when ``batch`` are queued), then a full window every ``batch_ns``
    (the predicted, high-percentile latency of a batch of ``batch``; a smaller window is no slower).
    Arrivals that came within ``w`` must all be done by ``w + budget``, by when it has finished
    ``floor((w + budget - timeout) / batch_ns)`` windows of ``batch``. docs/tuner.md derives it."""
    if batch < 1 or batch_ns <= 0:
        raise ValueError(f"need batch >= 1 and batch_ns > 0, got {batch}, {batch_ns}")
    return batch * max(0, (window_ns + budget_ns - timeout_ns) // batch_ns)
