"""Rebalance: partitions revoked from or assigned to this worker.

Owns nothing of its own; on revocation it drops the revoked partitions' unprocessed records (from
``intake`` and the planner's queue), waits for the windows in flight (``windows.drain``) and commits
what they finished; on assignment it opens the partitions' transactional producers (exactly-once).
"""
from __future__ import annotations

from slipstream.streams.timeline import mark

from slipstream.agents.stage import log


class Rebalance:
    async def on_revoked(self, revoked: set, commit_offsets) -> None:
        """Before partitions move: forget read and queued (unprocessed, unacked) items of the revoked
        ones (Kafka redelivers them to their new owner), let the windows in progress finish, wait until
        every processed window is delivered and acked, and commit their offsets, so the new owner starts
        right after the work done here (see ``slipstream.agents.acks`` for why faust's own commit cannot)."""
        mark("revoked", partitions=len(revoked))
        self._intake = [f for f in self._intake if f[0] not in revoked]
        self._intake_n = sum(len(f[1]) for f in self._intake)
        self.planner.forget(revoked)
        self._update_room()
        await self.drain()
        offsets = self.acks.committable(revoked)
        if self.txns is not None:  # the offsets are committed already, each in its window's transaction
            await self.txns.close(revoked)
        elif offsets:
            await commit_offsets(offsets)
        left = self.acks.forget(revoked)
        mark("revoke-done")
        log.info("revoked %d partition(s): committed %s; %d unfinished items left to their new owner",
                 len(revoked), {f"{tp.topic}[{tp.partition}]": o for tp, o in offsets.items()}, left)

    async def on_assigned(self, assigned: set, partitions: int | None = None) -> None:
        """After a rebalance, before faust seeks the partitions to their committed offsets: start the
        transactional producers of newly assigned partitions, fencing their previous owners. This
        worker's share of the input's ``partitions`` is its share of what the source gate admits."""
        self.input_share = min(1.0, len(assigned) / partitions) if partitions else 1.0
        self._set_gate_rate()
        if self.txns is not None:
            await self.txns.open(assigned)
