"""In-order acks per partition: an input offset is acked only when it and every earlier offset of its
partition read by this worker are done. faust commits the acked prefix, but its gap check lets a
commit pass a single unacked offset at the head of a partition (faust-streaming #606/#707); acking in
offset order means there is never such a gap to pass, so a rebalance cannot skip a request.

The tracker also knows, per partition, the offset to commit (one past the done prefix): faust drops
its own record of acked offsets of revoked partitions *before* telling the app about the revocation,
so the worker commits these itself at revocation, or a rebalance would redeliver every request done
since the last periodic commit."""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Hashable


class AckTracker:
    def __init__(self) -> None:
        self._pending: dict[Hashable, OrderedDict[int, list]] = {}  # tp -> offset -> [event, done]
        self._next: dict[Hashable, int] = {}  # tp -> offset after the done prefix (to commit)

    def read(self, tp: Hashable, offset: int, event: Any) -> None:
        self._pending.setdefault(tp, OrderedDict())[offset] = [event, False]

    def done(self, tp: Hashable, offset: int) -> list:
        """Mark one offset done; return the events now safe to ack, in offset order."""
        return self.done_many(((tp, offset),))

    def done_many(self, offsets) -> list:
        """Mark every (tp, offset) of a window done; return the events now safe to ack, per partition
        in offset order (each partition's prefix is swept once, not once per offset)."""
        touched = []
        for tp, offset in offsets:
            part = self._pending.get(tp)
            if part is not None and offset in part:  # else revoked meanwhile
                part[offset][1] = True
                touched.append(tp)
        out = []
        for tp in dict.fromkeys(touched):
            part = self._pending[tp]
            while part:
                first = next(iter(part))
                event, is_done = part[first]
                if not is_done:
                    break
                part.popitem(last=False)
                out.append(event)
                self._next[tp] = first + 1
        return out

    def committable(self, tps: set) -> dict:
        """Offsets to commit for ``tps``: one past each partition's done prefix."""
        return {tp: self._next[tp] for tp in tps if tp in self._next}

    def forget(self, tps: set) -> int:
        """Drop partitions that were revoked; returns how many unfinished offsets were dropped."""
        dropped = 0
        for tp in tps:
            dropped += sum(1 for _, d in self._pending.pop(tp, {}).values() if not d)
            self._next.pop(tp, None)
        return dropped

    def unfinished(self) -> int:
        return sum(1 for part in self._pending.values() for _, d in part.values() if not d)
