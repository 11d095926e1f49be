"""Intake: the records faust's consumer hands over (``slipstream.agents.intake``), admitted in one go.

:class:`Intake` owns the fetches not yet looked at, ``room`` (set while the worker takes more records),
``gate`` (``slipstream.streams.shedding``: what is dropped by its deadline before it is decoded, and at the source
stage what the bottleneck cannot serve in time), the plan in force the gate drains at, and the input
topic's record bound (``slipstream.streams.contract``). :meth:`Intake.admit` turns what arrived into queued items
and immediate answers (refusals, drops) and dead letters; what becomes of them is its caller's.

What is held is bounded in count and in time: no more is taken from Kafka while the records read and
not yet in a window reach ``MAX_QUEUED``, or while something else ``blocked`` (the delivery backlog is
full, or the queue holds more than the replicas serve within the SLO). Past capacity the backlog then
waits in Kafka undecoded, and is dropped from its headers when read.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Iterator, NamedTuple

from ...schemas.records import StageConfig, TunerHandoff
from ...streams import contract, control_io, topics
from ...streams.limits import Limits
from ...streams.shedding import SourceGate
from ...streams.spec import Pipeline
from .. import routing
from ..admission import admit
from ..metrics import StageMetrics
from ..window import Item
from . import log

# Records read but not yet in a window (intake and queue): above this, the consumer waits before it
# hands over the next fetch (``slipstream.agents.intake``), as faust's stream buffer (4,096) made it wait.
MAX_QUEUED = 4096


def has_room(held: int, queued: int, blocked: bool) -> bool:
    """Whether the consumer may hand over another fetch."""
    return held + queued < MAX_QUEUED and not blocked


class Admitted(NamedTuple):
    items: list[Item]  # valid requests, for the queue
    answered: list[tuple[list[Item], list]]  # (inputs, their answers) to deliver now: refusals, drops
    dead: list[tuple[Any, Any, str]]  # (partition, record, why) for the dead-letter topic


class Intake:
    def __init__(self, pipe: Pipeline, stage: str, metrics: StageMetrics, on_read: Callable[[Any, list], None],
                 wake: Callable[[], None], queued: Callable[[], int], blocked: Callable[[], bool]) -> None:
        self.pipe, self.stage, self.metrics = pipe, stage, metrics
        self.on_read = on_read  # every record read, before it is admitted (the ack tracker)
        self.wake = wake  # something arrived
        self.queued, self.blocked = queued, blocked  # what the room also depends on
        self._fetches: list = []  # (tp, records, received_ns) per fetch since the batch loop last looked
        self._held = 0  # records on it
        self.room = asyncio.Event()  # set while the consumer may hand over more (``slipstream.agents.intake``)
        self.room.set()
        self.gate = SourceGate(stage)  # deadline drops before decoding; at the source, shedding too
        self.plan_in_force = control_io.PlanInForce(pipe.name)  # the source stage's: what its gate drains at
        self.input_share = 1.0  # of the input topic's partitions, assigned to this worker
        self.set_limits(Limits())

    def set_limits(self, limits: Limits) -> None:
        """The topics' record limits (read at start): the data contract's bounds follow them."""
        source = topics.stage_input(self.pipe.name, self.stage)
        self.bounds = contract.Bounds.of(self.pipe, self.stage, limits.of(source))

    def on_records(self, tp: Any, records: list) -> None:
        """One partition's records of one fetch (``slipstream.agents.intake``: faust's consumer hands them over
        in one call): only put them on the intake list. Decoding, checks, metrics and the ack tracker
        work on everything read so far at once (:meth:`admit`)."""
        self._fetches.append((tp, records, time.time_ns()))
        self._held += len(records)
        self.update_room()
        self.wake()

    def update_room(self) -> None:
        if has_room(self._held, self.queued(), self.blocked()):
            self.room.set()
        else:
            self.room.clear()

    def arrived(self) -> bool:
        """Whether records wait to be admitted."""
        return bool(self._fetches)

    def values(self) -> Iterator[bytes]:
        """The values of the records held (their writer schemas are looked up before :meth:`admit`)."""
        return (r.value for _, records, _ in self._fetches for r in records)

    def admit(self, serve_ns: int) -> Admitted:
        """Admit every record read since the last call (``slipstream.agents.admission``; ``serve_ns``: the fastest
        a request can be served here, for the gate): valid requests for the queue; requests that break
        the contract answered with an error result, those refused by their deadline dropped; undecodable
        or oversize records, and those that cannot be answered, to the dead-letter topic."""
        fetches, self._fetches, self._held = self._fetches, [], 0
        for tp, records, _ in fetches:
            self.on_read(tp, records)
        now = time.time_ns()
        got = admit(self.pipe, fetches, self.bounds, now, lambda deadline: self.gate.judge(deadline, now, serve_ns))
        if got.items:
            self.metrics.lab(self.metrics.requests).inc(len(got.items))
        answered = []
        if got.refused:
            log.warning("refused %d request(s): %s", len(got.refused),
                        "; ".join(f"{it.req.request_id}: {out.value.reason}" for it, out in got.refused[:5]))
            self.metrics.lab(self.metrics.results, status="error").inc(len(got.refused))
            answered.append(([it for it, _ in got.refused], [([out], it) for it, out in got.refused]))
        if got.dropped:
            answered.append(self._unserved(got.dropped, now))
        return Admitted(got.items, answered, got.dead)

    def _unserved(self, dropped: list, now_ns: int) -> tuple[list[Item], list]:
        """The requests refused by their deadline (expired, or shed), answered together."""
        shed = sum(why.startswith("shed") for _, why in dropped)
        if shed:
            self.metrics.lab(self.metrics.drops, reason="shed").inc(shed)
        if len(dropped) > shed:
            self.metrics.lab(self.metrics.drops, reason="deadline").inc(len(dropped) - shed)
        return [it for it, _ in dropped], [([routing.ended(self.pipe, it.req, "dropped", why, now_ns)], it)
                                           for it, why in dropped]

    def forget(self, revoked: set) -> None:
        """Partitions revoked: their fetches not looked at yet are dropped (Kafka redelivers them)."""
        self._fetches = [f for f in self._fetches if f[0] not in revoked]
        self._held = sum(len(f[1]) for f in self._fetches)

    def on_plan(self, kind: str, rec: StageConfig | TunerHandoff) -> None:
        """A checked control record (the source stage's ``slipstream.agents.app.ControlFeed``): the plan in force."""
        self.plan_in_force.add(kind, rec)
        self._set_gate_rate()

    def set_share(self, assigned: int, partitions: int | None) -> None:
        """This worker holds ``assigned`` of the input's ``partitions``: its share of what the gate admits."""
        self.input_share = min(1.0, assigned / partitions) if partitions else 1.0
        self._set_gate_rate()

    def _set_gate_rate(self) -> None:
        cap = self.plan_in_force.capacity_qps()
        self.gate.rate_qps = cap * self.input_share if cap else None
