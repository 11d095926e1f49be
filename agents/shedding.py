"""Admission by deadline, decided before a record is decoded (issue 40: past capacity).

A Kafka topic is a FIFO queue: past capacity every request waits behind older ones and expires, and
a pipeline that spends its CPU decoding and dropping that backlog, or running its first stage for
requests a later stage will drop, serves nothing in time. Two rules, pure, with the clock passed in:

- **expired** (:func:`expired`): a request that cannot finish here by its deadline even served at
  once, alone (``serve_ns``: this stage's batch-1 latency), is dropped with reason ``deadline``.
  Read from the record's expiry header (``streams.expiry``), so it is answered without decoding.
- **shed** (:class:`SourceGate`, source stage only): the gateway's rule (``streams.shedding``) on
  what this worker sees. The requests it let through and whose result has not come yet are in flight
  (the source worker follows the results topic: ``agents.app.ResultsFeed``); the service rate is the
  lower of its busy throughput (``done`` results per second while requests were in flight: drops
  answered downstream free their place but are no service) and the plan's capacity in force (the
  hand-off with the replicas and shares of the StageConfigs in force,
  ``streams.control_io.planned_capacity_qps``, times this worker's share of the input partitions).
  A request predicted to finish after ``base + in_flight / rate`` past its deadline is dropped with
  reason ``shed`` before this stage spends anything on it. With no rate known nothing is shed: the
  workers' deadline drops are the backstop.
"""
from __future__ import annotations

from streams.shedding import Outcomes, decide

NS_PER_MS = 1_000_000


def expired(stage: str, deadline_ns: int, now_ns: int, serve_ns: int) -> str | None:
    """The ``deadline`` drop reason of a request that cannot finish at ``stage`` in time even served
    at once (``serve_ns``), else None."""
    late = now_ns + serve_ns - deadline_ns
    if late <= 0:
        return None
    return (f"deadline: expired before {stage} could serve it ({late / NS_PER_MS:.1f} ms late at "
            f"batch-1 latency {serve_ns / NS_PER_MS:.1f} ms)")


class SourceGate:
    """The source stage's admission: the requests this worker let through and what became of them
    (:meth:`answered`, from the results topic), judged by the gateway's rule (``streams.shedding``)."""

    def __init__(self, stage: str, grace_ms: float = 1000.0) -> None:
        self.stage = stage
        self.planned_qps: float | None = None  # the plan's capacity for this worker's partitions
        self.outcomes = Outcomes()
        self.pending: dict[str, int] = {}  # request id -> when to stop waiting for its answer (ns)
        self.grace_ns = int(grace_ms * NS_PER_MS)

    def judge(self, request_id: str, deadline_ns: int, now_ns: int, serve_ns: int) -> str | None:
        """None when the request is let through (and counted in flight), else its drop reason."""
        why = expired(self.stage, deadline_ns, now_ns, serve_ns)
        if why is not None:
            return why
        self._give_up(now_ns)
        budget_ms = (deadline_ns - now_ns - serve_ns) / NS_PER_MS
        d = decide(self.outcomes.load(now_ns, self.planned_qps), budget_ms)
        if not d.admit:
            return f"shed: {d.reason} at {self.stage}"
        if request_id not in self.pending:
            self.outcomes.admitted(now_ns)
            self.pending[request_id] = deadline_ns + self.grace_ns
        return None

    def answered(self, request_id: str, served: bool, latency_ms: float, now_ns: int) -> None:
        """A result on the results topic: one of ours leaves the requests in flight; a served one
        (``done``) counts as service, a drop or an error only frees its place."""
        if self.pending.pop(request_id, None) is not None:
            self.outcomes.left(now_ns, served, latency_ms if served else None)

    def _give_up(self, now_ns: int) -> None:
        """Stop waiting for answers past their deadline and grace (in admission order, which is about
        deadline order): they leave in flight unanswered."""
        while self.pending:
            rid, until = next(iter(self.pending.items()))
            if until > now_ns:
                return
            del self.pending[rid]
            self.outcomes.left(now_ns, False)
