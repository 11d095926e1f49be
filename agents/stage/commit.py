"""Commit: a window's outputs produced together, their delivery awaited, then its inputs acked (faust
commits one past the done prefix) or, with exactly-once, outputs and offsets committed in one Kafka
transaction per input partition (``slipstream.agents.transactions``).

Owns the producer settings of a window's burst, ``delivery`` (at least once) and the use of ``txns``
(exactly-once), ``acks`` (what is done, in offset order per partition) and ``backlog`` (windows
awaiting delivery: while full, no new window and no fetch).
"""
from __future__ import annotations

from typing import Any

from slipstream.agents import routing
from slipstream.agents.acks import AckTracker
from slipstream.agents.backlog import Backlog, out_bytes
from slipstream.agents.transactions import PartitionTransactions
from slipstream.agents.window import Item

# A window's outputs are sent in one burst; the linger only has to cover the burst, and a producer
# batch (per partition) holds a whole window of small records, so a window is one produce request per
# partition instead of one per 16 KiB (aiokafka's default batch).
WINDOW_LINGER_MS = 1
WINDOW_BATCH_BYTES = 1024 * 1024


class Commit:
    acks: AckTracker
    backlog: Backlog
    txns: PartitionTransactions | None

    def committable(self, tp: Any) -> int | None:
        """The offset faust commits for ``tp`` (``slipstream.agents.intake``): one past the done prefix; None
        with exactly-once, where each window's transaction commits its offsets."""
        return None if self.txns is not None else self.acks.committable({tp}).get(tp)

    async def _finish(self, window: list[Item], answers: list[tuple[list[routing.Out], Item]]) -> None:
        """Produce a window's outputs together, await their delivery, then ack its input offsets
        together (in offset order per partition): the one place a window's "produce + commit" happens,
        so it can become one Kafka transaction."""
        self.metrics.observe_outputs([o for outs, _ in answers for o in outs])  # results: latency, SLO
        per_input: dict[int, list] = {id(it): [] for it in window}
        for outs, it in answers:
            per_input[id(it)] += [(o, it) for o in outs]
        await self._deliver([(it.tp, it.offset, per_input[id(it)]) for it in window])

    async def _deliver(self, entries: list[tuple[Any, int, list]]) -> None:
        """Deliver each input's outputs ((out, item) pairs) and ack the inputs: at least once (every
        output in Kafka, then the acks), or exactly once (outputs and offsets in one transaction per
        partition, in offset order; ``slipstream.agents.transactions``), counted in the backlog meanwhile."""
        held = self.backlog.add(out_bytes(o for _, _, rs in entries for o, _ in rs))
        self.metrics.lab(self.metrics.backlog).set(self.backlog.windows)
        self._update_room()
        try:
            await self._deliver_and_ack(entries)
        finally:
            self.backlog.done(held)
            self.metrics.lab(self.metrics.backlog).set(self.backlog.windows)
            self._update_room()
            self._wake.set()

    async def _deliver_and_ack(self, entries: list[tuple[Any, int, list]]) -> None:
        if self.txns is None:  # faust commits the done prefix (``slipstream.agents.intake``, :meth:`committable`)
            owner = [k for k, (_, _, rs) in enumerate(entries) for _ in rs]
            lost = {owner[i] for i in await self.delivery.settle(
                await self.delivery.send_all([r for _, _, rs in entries for r in rs]))}
            if lost:  # not acked: read again after the restart that failing liveness brings
                self.heartbeat.fail(f"{len(lost)} input(s) neither delivered nor replaced: left unacked")
            self.acks.done_many([(tp, off) for k, (tp, off, _) in enumerate(entries) if k not in lost])
            return
        for tp, off, rs in entries:
            self.acks.attach(tp, off, rs)
        await self.txns.commit(self.acks.release([(tp, off) for tp, off, _ in entries]))
