"""Intake: the records faust's consumer hands over (``agents.intake``), admitted in one go.

Owns ``_intake`` (the fetches not yet looked at), ``_intake_n`` and ``room`` (set while the worker
takes more records). Reads the planner's queue and the backlog (both bound what is held); sends
refused requests and dead letters through ``commit``.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

from agents.admission import admit
from agents.delivery import dead_letter
from agents.stage import log

# Records read but not yet in a window (intake and queue): above this, the consumer waits before it
# hands over the next fetch (``agents.intake``), as faust's stream buffer (4,096) made it wait.
MAX_QUEUED = 4096


class Intake:
    _intake: list  # (tp, records, received_ns) per fetch since the batch loop last looked
    _intake_n: int  # records on it
    room: asyncio.Event  # set while fewer than MAX_QUEUED records wait (agents.intake)

    def on_records(self, tp: Any, records: list) -> None:
        """One partition's records of one fetch (``agents.intake``: faust's consumer hands them over
        in one call): only put them on the intake list. Decoding, checks, metrics and the ack tracker
        work on everything read so far at once (:meth:`_read_intake`)."""
        self._intake.append((tp, records, time.time_ns()))
        self._intake_n += len(records)
        self._update_room()
        if not self._wake.is_set():
            self._wake.set()

    def _update_room(self) -> None:
        if self._intake_n + len(self.planner) < MAX_QUEUED and not self.backlog.full():
            self.room.set()
        else:
            self.room.clear()

    def _read_intake(self) -> None:
        """Admit every record read since the last call (``agents.admission``): valid requests onto the
        window planner's queue; requests that break the contract answered with an error result;
        undecodable or oversize records, and those that cannot be answered, to the dead-letter topic."""
        if not self._intake:
            return
        fetches, self._intake, self._intake_n = self._intake, [], 0
        for tp, records, _ in fetches:
            self.acks.read_many(tp, records)
        got = admit(self.pipe, fetches, self.bounds, time.time_ns())
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

    async def _dead_letters(self, bad: list[tuple[Any, Any, str]]) -> None:
        entries = []
        for tp, m, error in bad:
            log.warning("dead letter %s[%d]@%d: %s", m.topic, m.partition, m.offset, error)
            out = dead_letter(self.pipe, self.stage, self.limits, m.value, m.topic, m.partition, m.offset, error)
            entries.append((tp, m.offset, [(out, None)]))
        self.metrics.lab(self.metrics.dead_letters).inc(len(bad))
        await self._deliver(entries)
