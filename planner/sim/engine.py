"""The event loop: simpy's core shape, nothing else (no processes, no event objects).

A heap of ``(time_ns, priority, key, seq, target, token)``; :meth:`Engine.run` pops the earliest and
calls ``target.fire(time_ns, token)``. At equal times a batch completion (:data:`DONE`) comes before a
replica change (:data:`CHANGE`), which comes before a wake-up (:data:`WAKE`): everything that happens
at an instant has happened before a queue looks at it. Completions at one instant go in the order of
their ``key`` (``slipstream.planner.sim.servers``), anything else in the order of scheduling (``seq``), so a run
is a pure function of its inputs. A wake-up for the current instant skips the heap: it waits in
``soon`` until the instant's completions and changes have fired.

Also here: :class:`Draws`, random numbers drawn from numpy in blocks and handed out one by one, so
the hot loop never calls numpy for a single value.
"""
from __future__ import annotations

import heapq
import itertools
from collections import deque
from typing import Callable, Protocol

import numpy as np

DONE, CHANGE, WAKE = 0, 1, 2
BLOCK = 1 << 14


class Target(Protocol):
    def fire(self, now: int, token: object) -> None: ...


class Engine:
    __slots__ = ("heap", "_seq", "events", "now", "soon")

    def __init__(self) -> None:
        self.heap: list[tuple] = []
        self._seq = itertools.count().__next__
        self.events = 0
        self.now = 0
        self.soon: deque[Target] = deque()  # wake-ups due now: fired once the instant's other events are

    def at(self, time_ns: int, priority: int, target: Target, token: object = None, key: int = 0) -> None:
        if time_ns == self.now and priority == WAKE and token is None:
            self.soon.append(target)  # a wake-up at this instant needs no trip through the heap
            return
        heapq.heappush(self.heap, (time_ns, priority, key, self._seq(), target, token))

    def run(self) -> int:
        """Fire every event in time order until none is left; return how many fired."""
        heap, soon = self.heap, self.soon
        pop = heapq.heappop
        n = 0
        while True:
            if soon and (not heap or heap[0][0] > self.now or heap[0][1] == WAKE):
                soon.popleft().fire(self.now, None)
            elif heap:
                t, _, _, _, target, token = pop(heap)
                self.now = t
                target.fire(t, token)
            else:
                break
            n += 1
        self.events += n
        return n


class Draws:
    """Values of ``sample(n)`` (a seeded numpy draw) handed out in order, a block at a time."""

    __slots__ = ("_sample", "_buf", "_pos")

    def __init__(self, sample: Callable[[int], np.ndarray]) -> None:
        self._sample = sample
        self._buf: list = []
        self._pos = 0

    def take(self, n: int) -> list:
        if self._pos + n > len(self._buf):
            self._buf = self._buf[self._pos:] + self._sample(max(BLOCK, n)).tolist()
            self._pos = 0
        out = self._buf[self._pos:self._pos + n]
        self._pos += n
        return out

    def one(self):
        if self._pos >= len(self._buf):
            self._buf = self._sample(BLOCK).tolist()
            self._pos = 0
        v = self._buf[self._pos]
        self._pos += 1
        return v
