"""Admission by deadline, decided before a record is decoded (issue 40: past capacity). Shared:
the stage workers judge each record they read with it (``slipstream.agents.stage.intake``), and the estimator
judges each simulated arrival with the same code and the same capacity (``slipstream.planner.sim.gate``).

A Kafka topic is a FIFO queue: past capacity every request waits behind older ones and expires, and
a pipeline that spends its CPU decoding and dropping that backlog, or running its first stage for
requests a later stage will drop, serves nothing in time. Two rules, pure, with the clock passed in:

- **expired** (:func:`expired`): a request that cannot finish here by its deadline even served at
  once, alone (``serve_ns``: this stage's batch-1 latency), is dropped with reason ``deadline``.
  Read from the record's expiry header (``slipstream.streams.expiry``), so it is answered without decoding.
- **shed** (:class:`SourceGate`, source stage only): the requests admitted so far drain at the
  bottleneck's rate (the slowest stage's capacity in pipeline requests/s, from the planner's hand-off
  and the replicas in force: ``slipstream.streams.control_io.planned_capacity_qps``, times this worker's share of
  the input partitions). A new request is predicted to finish after its own service plus the time the
  admitted requests ahead of it need at that rate; past its deadline it is dropped with reason
  ``shed`` before this stage spends anything on it, and is not counted as ahead of later ones.
  The same rule as the gateway's 429 (``slipstream.gateway.shedding``), fed by what a worker sees: the plan's
  capacity in force instead of answers, the requests it let through instead of those in flight.
  With no capacity known (no hand-off yet) nothing is shed: the workers' deadline drops are the backstop.
"""
from __future__ import annotations

from dataclasses import dataclass

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000


def host_ms_per_request(request_cpu_ms: float, window_cpu_ms: float, windows: float) -> float:
    """Host CPU ms one admitted request takes beyond the models' (``HostModel.per_request_ms``): its
    own part, and ``window_cpu_ms`` for each of the ``windows`` windows it makes (its stages' visit
    ratios at windows of one item). The planner's host bound and the gate's drain rate read it."""
    return request_cpu_ms + windows * window_cpu_ms


def expired(stage: str, deadline_ns: int, now_ns: int, serve_ns: int) -> str | None:
    """The ``deadline`` drop reason of a request that cannot finish at ``stage`` in time even served
    at once (``serve_ns``), else None."""
    late = now_ns + serve_ns - deadline_ns
    if late <= 0:
        return None
    return (f"deadline: expired before {stage} could serve it ({late / NS_PER_MS:.1f} ms late at "
            f"batch-1 latency {serve_ns / NS_PER_MS:.1f} ms)")


@dataclass
class SourceGate:
    """The source stage's admission: a leaky bucket of the requests let through, draining at the
    bottleneck's rate (``rate_qps``; None: unknown, everything is let through)."""

    stage: str
    rate_qps: float | None = None
    level: float = 0.0  # requests let through and not yet drained at the bottleneck
    last_ns: int = 0

    def judge(self, deadline_ns: int, now_ns: int, serve_ns: int) -> str | None:
        """None when the request is let through (and counted), else its drop reason."""
        why = expired(self.stage, deadline_ns, now_ns, serve_ns)
        if why is not None or not self.rate_qps or self.rate_qps <= 0:
            return why
        self.level = max(0.0, self.level - (now_ns - self.last_ns) / NS_PER_S * self.rate_qps)
        self.last_ns = now_ns
        wait_ns = (self.level + 1) / self.rate_qps * NS_PER_S
        if now_ns + serve_ns + wait_ns > deadline_ns:
            return (f"shed: predicted wait {wait_ns / NS_PER_MS:.0f} ms behind {self.level:.0f} request(s) "
                    f"at the bottleneck's {self.rate_qps:.1f} req/s leaves no time before the deadline "
                    f"({(deadline_ns - now_ns) / NS_PER_MS:.0f} ms left at {self.stage})")
        self.level += 1
        return None
