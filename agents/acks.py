"""In-order acks per partition: an input offset is acked only when it and every earlier offset of its
partition read by this worker are done. faust commits exactly that done prefix (``agents.intake``
asks :meth:`AckTracker.committable`), not its own record of per-message acks, whose gap check lets a
commit pass a single unacked offset at the head of a partition (faust-streaming #606/#707), so a
rebalance cannot skip a request.

The tracker also knows, per partition, the offset to commit (one past the done prefix): faust drops
its own record of acked offsets of revoked partitions *before* telling the app about the revocation,
so the worker commits these itself at revocation, or a rebalance would redeliver every request done
since the last periodic commit.

Exactly-once (``agents.transactions``) needs one more thing: a committed offset must cover exactly the
inputs whose outputs are committed, so an output may only become visible together with the offset
that passes its input. Outputs are therefore attached to their input's offset (:meth:`AckTracker.attach`)
and handed out with the done prefix that passes them (:meth:`AckTracker.release`): a window that
finishes before an earlier one of the same partition waits for it.
"""
from __future__ import annotations

from collections import OrderedDict
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


class AckTracker:
    def __init__(self) -> None:
        self._pending: dict[Hashable, OrderedDict[int, list]] = {}  # tp -> offset -> [event, done, outputs]
        self._next: dict[Hashable, int] = {}  # tp -> offset after the done prefix (to commit)

    def read(self, tp: Hashable, offset: int, event: Any) -> None:
        self._pending.setdefault(tp, OrderedDict())[offset] = [event, False, []]

    def read_many(self, tp: Hashable, records: list) -> None:
        """Every record (with ``.offset``) of one partition's fetch, in offset order."""
        part = self._pending.setdefault(tp, OrderedDict())
        for r in records:
            part[r.offset] = [r, False, []]

    def attach(self, tp: Hashable, offset: int, outputs: list) -> None:
        """Outputs that must become visible together with the commit of ``offset`` (ignored when the
        partition was revoked meanwhile: its new owner makes them again)."""
        entry = self._pending.get(tp, {}).get(offset)
        if entry is not None:
            entry[2].extend(outputs)

    def done(self, tp: Hashable, offset: int) -> list:
        """Mark one offset done; return the events now safe to ack, in offset order."""
        return self.done_many(((tp, offset),))

    def done_many(self, offsets) -> list:
        """Mark every (tp, offset) of a window done; return the events now safe to ack, per partition
        in offset order (each partition's prefix is swept once, not once per offset)."""
        return [e for r in self.release(offsets) for e in r.events]

    def release(self, offsets) -> list[Release]:
        """Mark every (tp, offset) done; per partition whose done prefix grew, what it passed."""
        touched = []
        for tp, offset in offsets:
            part = self._pending.get(tp)
            if part is not None and offset in part:  # else revoked meanwhile
                part[offset][1] = True
                touched.append(tp)
        out = []
        for tp in dict.fromkeys(touched):
            part, events, outputs = self._pending[tp], [], []
            while part:
                first = next(iter(part))
                event, is_done, outs = part[first]
                if not is_done:
                    break
                part.popitem(last=False)
                events.append(event)
                outputs.extend(outs)
                self._next[tp] = first + 1
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
            dropped += sum(1 for _, d, _ in self._pending.pop(tp, {}).values() if not d)
            self._next.pop(tp, None)
        return dropped

    def unfinished(self) -> int:
        return sum(1 for part in self._pending.values() for _, d, _ in part.values() if not d)
