"""Intake: the records faust's consumer hands over (``slipstream.agents.intake``), admitted in one go.

Owns ``_intake`` (the fetches not yet looked at), ``_intake_n``, ``room`` (set while the worker
takes more records) and ``gate`` (``slipstream.streams.shedding``: what is dropped by its deadline before it is
decoded, and at the source stage what the bottleneck cannot serve in time). Reads the planner's queue,
the backlog and the fleet's pace (they bound what is held); sends refused requests, drops and dead
letters through ``commit``.

What is held is bounded in time as well as in count: no more is taken from Kafka while the queue
already holds more than the instances serve within the SLO (at the predicted pace of a full batch).
Past capacity the backlog then waits in Kafka undecoded, and is dropped from its headers when read.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

from slipstream.agents import routing
from slipstream.agents.admission import admit
from slipstream.agents.delivery import dead_letter
from slipstream.streams.shedding import SourceGate
from slipstream.agents.stage import log
from slipstream.streams import control_io
from slipstream.streams.batching import NS_PER_MS

# Records read but not yet in a window (intake and queue): above this, the consumer waits before it
# hands over the next fetch (``slipstream.agents.intake``), as faust's stream buffer (4,096) made it wait.
MAX_QUEUED = 4096


class Intake:
    _intake: list  # (tp, records, received_ns) per fetch since the batch loop last looked
    _intake_n: int  # records on it
    room: asyncio.Event  # set while fewer than MAX_QUEUED records wait (slipstream.agents.intake)
    gate: SourceGate
    plan_in_force: control_io.PlanInForce  # the source stage's: the capacity its gate drains at
    input_share: float  # of the input topic's partitions, assigned to this worker
    _pace_ns: int  # predicted time a queued item takes, one instance serving full batches (0: unknown)

    def on_records(self, tp: Any, records: list) -> None:
        """One partition's records of one fetch (``slipstream.agents.intake``: faust's consumer hands them over
        in one call): only put them on the intake list. Decoding, checks, metrics and the ack tracker
        work on everything read so far at once (:meth:`_read_intake`)."""
        self._intake.append((tp, records, time.time_ns()))
        self._intake_n += len(records)
        self._update_room()
        if not self._wake.is_set():
            self._wake.set()

    def _update_room(self) -> None:
        if self._intake_n + len(self.planner) < MAX_QUEUED and not self.backlog.full() and not self._held_too_long():
            self.room.set()
        else:
            self.room.clear()

    def _held_too_long(self) -> bool:
        """The queue holds more than the instances serve within the SLO (always room for a window each)."""
        n, instances = len(self.planner), max(len(self.fleet.instances), 1)
        if n < self.config.max_batch * instances:
            return False
        return n * self._pace_ns > self.pipe.slo_ms * NS_PER_MS * instances

    def _serve_ns(self) -> int:
        """The fastest batch-1 latency predicted for a variant in service (0 when none is loaded), and
        the pace of a full batch (:meth:`_held_too_long`) updated on the way."""
        vs = [self.fleet.variants[v] for v in self.config.variants if v in self.fleet.variants]
        if not vs:
            return 0
        b = self.config.max_batch
        self._pace_ns = max(v.predictor.predict_ns(b) for v in vs) // b
        return min(v.predictor.predict_ns(1) for v in vs)

    def _read_intake(self) -> None:
        """Admit every record read since the last call (``slipstream.agents.admission``): valid requests onto the
        window planner's queue; requests that break the contract answered with an error result;
        undecodable or oversize records, and those that cannot be answered, to the dead-letter topic."""
        if not self._intake:
            return
        fetches, self._intake, self._intake_n = self._intake, [], 0
        for tp, records, _ in fetches:
            self.acks.read_many(tp, records)
        now, serve_ns = time.time_ns(), self._serve_ns()
        got = admit(self.pipe, fetches, self.bounds, now, lambda deadline: self.gate.judge(deadline, now, serve_ns))
        if got.items:
            self.metrics.lab(self.metrics.requests).inc(len(got.items))
            self.planner.add(got.items)
            self.metrics.lab(self.metrics.queue_depth).set(len(self.planner))
        if got.refused:
            log.warning("refused %d request(s): %s", len(got.refused),
                        "; ".join(f"{it.req['request_id']}: {out.value['reason']}" for it, out in got.refused[:5]))
            self.metrics.lab(self.metrics.results, status="error").inc(len(got.refused))
            self._track(self._finish([it for it, _ in got.refused], [([out], it) for it, out in got.refused]))
        if got.dead:
            self._track(self._dead_letters(got.dead))
        if got.dropped:
            self._drop_unserved(got.dropped, now)

    def on_plan(self, kind: str, rec: dict) -> None:
        """A checked control record (the source stage's ``slipstream.agents.app.ControlFeed``): the plan in force."""
        self.plan_in_force.add(kind, rec)
        self._set_gate_rate()

    def _set_gate_rate(self) -> None:
        cap = self.plan_in_force.capacity_qps()
        self.gate.rate_qps = cap * self.input_share if cap else None

    def _drop_unserved(self, dropped: list, now_ns: int) -> None:
        """Answer at once, together, the requests refused by their deadline (expired, or shed)."""
        shed = sum(why.startswith("shed") for _, why in dropped)
        if shed:
            self.metrics.lab(self.metrics.drops, reason="shed").inc(shed)
        if len(dropped) > shed:
            self.metrics.lab(self.metrics.drops, reason="deadline").inc(len(dropped) - shed)
        self._track(self._finish([it for it, _ in dropped],
                                 [([routing.ended(self.pipe, it.req, "dropped", why, now_ns)], it) for it, why in dropped]))

    async def _dead_letters(self, bad: list[tuple[Any, Any, str]]) -> None:
        entries = []
        for tp, m, error in bad:
            log.warning("dead letter %s[%d]@%d: %s", m.topic, m.partition, m.offset, error)
            out = dead_letter(self.pipe, self.stage, self.limits, m.value, m.topic, m.partition, m.offset, error)
            entries.append((tp, m.offset, [(out, None)]))
        self.metrics.lab(self.metrics.dead_letters).inc(len(bad))
        await self._deliver(entries)
