"""In-order acks per partition: an input offset is acked only when it and every earlier offset of its
partition read by this worker are done. faust commits exactly that done prefix (``slipstream.agents.intake``
asks :meth:`AckTracker.committable`), not its own record of per-message acks, whose gap check lets a
commit pass a single unacked offset at the head of a partition (faust-streaming #606/#707), so a
rebalance cannot skip a request.

The tracker also knows, per partition, the offset to commit (one past the done prefix): faust drops
its own record of acked offsets of revoked partitions *before* telling the app about the revocation,
so the worker commits these itself at revocation, or a rebalance would redeliver every request done
since the last periodic commit.

Exactly-once (``slipstream.agents.transactions``) needs one more thing: a committed offset must cover exactly the
inputs whose outputs are committed, so an output may only become visible together with the offset
that passes its input. Outputs are therefore attached to their input's offset (:meth:`AckTracker.attach`)
and handed out with the done prefix that passes them (:meth:`AckTracker.release`): a window that
finishes before an earlier one of the same partition waits for it.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Hashable


@dataclass(frozen=True)
class Release:
    """A partition's done prefix that grew: its events (to ack), the outputs attached to them (in
    offset order) and the offset to commit now (one past the prefix)."""
    tp: Hashable
    events: list
    outputs: list
    next_offset: int


class _Partition:
    """One partition's read offsets in read order, their events, which are done, attached outputs."""
    __slots__ = ("order", "events", "done", "outputs")

    def __init__(self) -> None:
        self.order: deque[int] = deque()
        self.events: dict[int, Any] = {}
        self.done: set[int] = set()
        self.outputs: dict[int, list] = {}


class AckTracker:
    def __init__(self) -> None:
        self._pending: dict[Hashable, _Partition] = {}
        self._next: dict[Hashable, int] = {}  # tp -> offset after the done prefix (to commit)

    def read(self, tp: Hashable, offset: int, event: Any) -> None:
        self._read(tp, [offset], [event])

    def read_many(self, tp: Hashable, records: list, events: list | None = None) -> None:
        """Every record (with ``.offset``) of one partition's fetch, in offset order (``events``: what
        to hand back for each when its prefix is done; the records themselves by default). An offset
        read again (a seek back) is pending again, in its first place."""
        self._read(tp, [r.offset for r in records], records if events is None else events)

    def _read(self, tp: Hashable, offsets: list[int], events: list) -> None:
        part = self._pending.get(tp)
        if part is None:
            part = self._pending[tp] = _Partition()
        if part.events and offsets and offsets[0] <= part.order[-1]:
            for off in offsets:
                if off in part.events:
                    part.done.discard(off)
                else:
                    part.order.append(off)
        else:
            part.order.extend(offsets)
        part.events.update(zip(offsets, events))

    def attach(self, tp: Hashable, offset: int, outputs: list) -> None:
        """Outputs that must become visible together with the commit of ``offset`` (ignored when the
        partition was revoked meanwhile: its new owner makes them again)."""
        part = self._pending.get(tp)
        if part is not None and offset in part.events:
            part.outputs.setdefault(offset, []).extend(outputs)

    def done(self, tp: Hashable, offset: int) -> list:
        """Mark one offset done; return the events now safe to ack, in offset order."""
        return self.done_many(((tp, offset),))

    def done_many(self, offsets) -> list:
        """Mark every (tp, offset) of a window done; return the events now safe to ack, per partition
        in offset order (each partition's prefix is swept once, not once per offset)."""
        return [e for r in self.release(offsets) for e in r.events]

    def release(self, offsets) -> list[Release]:
        """Mark every (tp, offset) done; per partition whose done prefix grew, what it passed."""
        touched = {}
        for tp, offset in offsets:
            part = self._pending.get(tp)
            if part is not None and offset in part.events:  # else revoked meanwhile
                part.done.add(offset)
                touched[tp] = part
        out = []
        for tp, part in touched.items():
            order, done, events, outputs = part.order, part.done, [], []
            while order and order[0] in done:
                offset = order.popleft()
                done.discard(offset)
                events.append(part.events.pop(offset))
                if part.outputs:
                    outputs.extend(part.outputs.pop(offset, ()))
                self._next[tp] = offset + 1
            if events:
                out.append(Release(tp, events, outputs, self._next[tp]))
        return out

    def committable(self, tps: set) -> dict:
        """Offsets to commit for ``tps``: one past each partition's done prefix."""
        return {tp: self._next[tp] for tp in tps if tp in self._next}

    def forget(self, tps: set) -> int:
        """Drop partitions that were revoked; returns how many unfinished offsets were dropped."""
        dropped = 0
        for tp in tps:
            part = self._pending.pop(tp, None)
            if part is not None:
                dropped += len(part.events) - len(part.done)
            self._next.pop(tp, None)
        return dropped

    def unfinished(self) -> int:
        return sum(len(p.events) - len(p.done) for p in self._pending.values())
