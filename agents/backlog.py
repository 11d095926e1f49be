"""The bound on outputs awaiting delivery: a worker frees a replica before its window's outputs
are in Kafka (``slipstream.agents.stage.windows``), so while a produce cannot complete (a broker away, too few in-sync
replicas) finished windows, each holding its outputs and their inputs' payloads, would pile up for as
long as it lasts. :class:`Backlog` counts them (windows, and their outputs' payload bytes); while it
is full the worker takes no new window and its consumer fetches no more (``slipstream.agents.intake``'s
back-pressure), so memory stays bounded and the unread records wait in Kafka, not in the worker.

Pure bookkeeping (no clock, no I/O): the worker calls :meth:`Backlog.add` before a delivery and
:meth:`Backlog.done` after it.
"""
from __future__ import annotations

from typing import Any, Iterable

MAX_WINDOWS = 64  # a window per replica and more: the bound holds only while produces stall
MAX_BYTES = 64 * 1024 * 1024


def out_bytes(outs: Iterable[Any]) -> int:
    """The payload bytes ``slipstream.agents.routing.Out`` records hold (what dominates their memory)."""
    n = 0
    for o in outs:
        v = o.value
        n += len(getattr(v, "payload", None) or getattr(v, "output", None) or getattr(v, "original", None) or b"")
    return n


class Backlog:
    def __init__(self, max_windows: int = MAX_WINDOWS, max_bytes: int = MAX_BYTES) -> None:
        if max_windows < 1 or max_bytes < 1:
            raise ValueError(f"backlog bounds must be >= 1, got {max_windows} windows and {max_bytes} bytes")
        self.max_windows, self.max_bytes = max_windows, max_bytes
        self.windows = self.bytes = 0

    def add(self, n_bytes: int) -> int:
        """One more delivery of ``n_bytes`` in progress; returns what to hand to :meth:`done`."""
        self.windows += 1
        self.bytes += n_bytes
        return n_bytes

    def done(self, n_bytes: int) -> None:
        self.windows -= 1
        self.bytes -= n_bytes

    def full(self) -> bool:
        """Take no more work: at either bound. One delivery over the byte bound is let in when
        nothing else waits, so a single large window is never stuck."""
        return self.windows >= self.max_windows or (self.windows > 0 and self.bytes >= self.max_bytes)
