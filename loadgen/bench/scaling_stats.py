"""What a scale event cost, read from a run's results and its workers' timeline marks (pure).

For an event at ``t`` (the moment the new replica count or variant was published):

- *running* replicas are the ones (hop ``worker`` ids, ``<host>-<pid>/<index>``) that served
  requests created in the ``span_s`` before ``t``;
- their queue wait (stage start minus enqueue, the producer's clock) for requests created in the
  ``span_s`` after ``t`` is set against their wait before: the extra p50/p99/max is what the event
  cost the replicas already serving (a rebalance shows here as seconds, an in-worker change as ~0);
- *first serve* is how long after ``t`` a replica that was not running served its first request;
- the breakdown says where the time went, from ``agents.timeline`` marks after ``t``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

NS = 1_000_000_000


@dataclass(frozen=True)
class Served:
    """One request as the stage saw it (from its hop timing)."""

    created_ns: int
    enqueued_ns: int
    started_ns: int
    replica: str  # hop ``worker`` id: ``<host>-<pid>/<index>``
    variant: str

    @property
    def wait_s(self) -> float:
        return (self.started_ns - self.enqueued_ns) / NS


@dataclass(frozen=True)
class Mark:
    worker: str  # which process printed it (log file or pid)
    event: str
    at_ns: int
    fields: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class EventCost:
    label: str
    requests: int  # requests of the running replicas after the event
    wait_before_ms: tuple[float, float, float]  # p50, p99, max of the running replicas before
    wait_after_ms: tuple[float, float, float]
    first_serve_s: float | None  # a new replica's first request after the event (None: no new one)
    breakdown_ms: Mapping[str, float]

    @property
    def extra_p99_ms(self) -> float:
        return self.wait_after_ms[1] - self.wait_before_ms[1]

    @property
    def extra_max_ms(self) -> float:
        return self.wait_after_ms[2] - self.wait_before_ms[2]


def _stats_ms(waits: Sequence[float]) -> tuple[float, float, float]:
    if not waits:
        return (math.nan, math.nan, math.nan)
    a = np.asarray(waits) * 1000
    return float(np.percentile(a, 50)), float(np.percentile(a, 99)), float(a.max())


def event_cost(label: str, at_ns: int, served: Sequence[Served], marks: Sequence[Mark],
               span_s: float = 10.0, before_s: float = 5.0) -> EventCost:
    """``before_s``: the settled end of the previous span (a previous event's pause must not count
    as this one's normal)."""
    span = int(span_s * NS)
    before = [s for s in served if at_ns - int(before_s * NS) <= s.created_ns < at_ns]
    after = [s for s in served if at_ns <= s.created_ns < at_ns + span]
    running = {s.replica for s in before}
    kept = [s for s in after if s.replica in running] or after  # a variant switch replaces them all
    fresh = [s.started_ns for s in served if s.replica not in running and s.started_ns >= at_ns]
    return EventCost(label, len(kept), _stats_ms([s.wait_s for s in before]), _stats_ms([s.wait_s for s in kept]),
                     (min(fresh) - at_ns) / NS if fresh else None,
                     breakdown([m for m in marks if at_ns <= m.at_ns < at_ns + span], at_ns,
                               min(fresh) if fresh else None))


def breakdown(marks: Sequence[Mark], at_ns: int, first_serve_ns: int | None) -> dict[str, float]:
    """Where an event's time went, in ms, from the marks after it (phases absent from the marks are
    left out: an in-worker change has no rebalance phases, a rebalance no config-loaded)."""
    first = {}
    last = {}
    for m in sorted(marks, key=lambda m: m.at_ns):
        first.setdefault(m.event, m)
        last[m.event] = m
    out: dict[str, float] = {}

    def ms(a: int, b: int) -> float:
        return (b - a) / 1e6

    loaded = [m for m in marks if m.event == "config-loaded" and int(m.fields.get("new", 0)) > 0]
    if loaded:  # in-worker scaling: load and warm beside serving, then a window boundary
        cl = loaded[-1]
        out["model load (beside serving)"] = float(cl.fields.get("load_ms", 0.0))
        out["warm-up (beside serving)"] = float(cl.fields.get("warm_ms", 0.0))
        in_force = [m for m in marks if m.event == "config-in-force" and m.at_ns >= cl.at_ns]
        if in_force:
            out["window boundary"] = ms(cl.at_ns, in_force[0].at_ns)
    if "process-start" in first:  # a new worker process
        ps = first["process-start"]
        out["process start + imports"] = ms(at_ns, ps.at_ns)
        if "model-loaded" in first:
            out["model load + warm-up"] = ms(ps.at_ns, first["model-loaded"].at_ns)
    if "revoked" in first:  # a rebalance of the stage's group: a join (new process) or a leave
        asked = first["process-start"].at_ns if "process-start" in first else at_ns
        out["heartbeat wait (join/leave to revoke)"] = ms(asked, first["revoked"].at_ns)
        if "revoke-done" in last:
            out["revoke callbacks (drain, commit)"] = ms(first["revoked"].at_ns, last["revoke-done"].at_ns)
            if "assigned" in last:
                out["join/sync"] = ms(last["revoke-done"].at_ns, last["assigned"].at_ns)
    if first_serve_ns is not None:
        ready = max((m.at_ns for m in marks if m.event in ("assigned", "config-in-force")), default=None)
        if ready is not None and first_serve_ns >= ready:
            out["fetch restart (until first request)"] = ms(ready, first_serve_ns)
    return out
