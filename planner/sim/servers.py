"""A consumer's queue and the servers (model threads) that take windows from it: the agent loop.

:class:`Queue` is one Kafka consumer's FIFO: the items of its partitions in the order they become
visible to it. Items are three parallel lists (visible time, request, produce time) read through a
``head`` index, and may hold items that become visible later (the arrivals already known), so the
queue can say when the next window will be ready without an event per arrival.

:class:`Server` is one model thread. The agent loop of ``slipstream.streams.batching`` is split between them:
the queue decides when a window is taken (:func:`next_window`: ``ready``, ``window_size``) and hands
it to the free server that has waited longest; the server works it off in sub-batches (``whole_ns``,
else ``decide``), one batch at a time on the group's host. A mixed stage's server first splits the
window by variant (``groups.Mix``) and works the variants off one after the other, each with its
own latency, as the worker's ``work_off`` does. In ``in-worker`` mode c servers share one queue; in
``rebalance`` mode each server has its own (``slipstream.planner.sim.groups``).

Same-instant rule: a queue never takes a window in the middle of an instant. Arrivals and freed
servers only *poke* it (a wake-up at the next time a window can be ready, with the lowest priority),
so a window taken at t sees every item visible at t, whatever the order of the events at t.

Every batch completion carries a key, ``(stage, queue, window offset, sub-batch)``, that orders
completions at the same instant the same way in the event loop and in ``slipstream.planner.sim.stagewise``.
"""
from __future__ import annotations

from bisect import bisect_right
from collections import deque
from typing import TYPE_CHECKING

from ...streams.batching import BatchSettings, Decision, decide, flush_due_ns, ready, whole_ns, window_size
from .engine import DONE, WAKE
from .params import next_fetch

if TYPE_CHECKING:
    from .groups import Group

_COMPACT = 1 << 15  # drop consumed items from a queue's lists once this many have piled up
SUB_BITS = 8  # sub-batches per window < 2**8 (max_batch <= 255)
OFFSET_BITS = 44


def window_due(times: list[int], head: int, s: BatchSettings) -> int:
    """When the window at ``head`` will be ready given the items known: the oldest item's batch timeout,
    or the arrival of the item that fills a max batch, whichever is first (later arrivals can only
    bring it forward)."""
    due = flush_due_ns(times[head], s)
    full = head + s.max_batch - 1
    if full < len(times) and times[full] < due:
        due = times[full]
    return due


def next_window(times: list[int], head: int, earliest: int, s: BatchSettings) -> tuple[int, int]:
    """When a server free from ``earliest`` takes the window at ``head``, and how many items it takes
    (``batching.ready`` must agree, ``batching.window_size`` sizes it)."""
    due = window_due(times, head, s)
    t = due if due > earliest else earliest
    full = head + s.max_batch  # no need to count past a max batch: ready and window_size cap there
    queued = bisect_right(times, t, head, full if full < len(times) else len(times)) - head
    if not ready(queued, times[head], t, s):
        raise AssertionError(f"batching.ready disagrees with the simulator: not ready at {t} ns")
    return t, window_size(queued, s)


def queue_key(stage: int, queue: int) -> int:
    """The high part of a completion key: which queue a window came from."""
    return (stage << 16 | queue) << (OFFSET_BITS + SUB_BITS)


class Queue:
    __slots__ = ("group", "key", "times", "reqs", "sent", "parts", "head", "taken", "idle", "wake_at",
                 "version", "fetch")

    def __init__(self, group: "Group", index: int, fetch: tuple[int, int] | None = None) -> None:
        self.group = group
        self.key = queue_key(group.stage.index, index)
        self.times: list[int] = []  # when each item is visible to this consumer (sorted)
        self.reqs: list[int] = []  # its request
        self.sent: list[int] = []  # when it was produced (the previous hop's finish)
        self.parts: list[int] = []  # its partition (rebalance mode only)
        self.head = 0
        self.taken = 0  # items ever taken: the offset of the next window
        self.idle: deque[Server] = deque()
        self.wake_at = -1
        self.version = 0
        self.fetch = fetch  # (interval ns, phase ns) of this consumer's fetches, or None

    def visible(self, t: int) -> int:
        """When an item fetchable at ``t`` is in this consumer's hands: its next fetch."""
        return t if self.fetch is None else next_fetch(t, self.fetch)

    def put(self, vis: list[int], reqs: list[int], sent: list[int]) -> None:
        """Items fetchable at ``vis`` (sorted), in visible order after this consumer's fetch cadence."""
        times = self.times
        if self.fetch is None and (not times or vis[0] >= times[-1]):
            times.extend(vis)
            self.reqs.extend(reqs)
            self.sent.extend(sent)
            return
        for v, r, s in zip(vis, reqs, sent):
            self.put_one(v, r, s)

    def put_one(self, v: int, r: int, s: int, p: int | None = None) -> None:
        if self.fetch is not None:
            v = self.visible(v)
        times = self.times
        if not times or v >= times[-1]:
            times.append(v)
            self.reqs.append(r)
            self.sent.append(s)
            if p is not None:
                self.parts.append(p)
            return
        i = bisect_right(times, v, self.head)  # overtaken by a faster transit: insert in visible order
        times.insert(i, v)
        self.reqs.insert(i, r)
        self.sent.insert(i, s)
        if p is not None:
            self.parts.insert(i, p)

    def poke(self, now: int) -> None:
        """Something changed (items arrived, a server is free): wake when a window can be taken."""
        if self.idle and self.head < len(self.times):
            self.wake(max(now, window_due(self.times, self.head, self.group.settings)))

    def wake(self, due: int) -> None:
        if self.wake_at != due:
            self.version += 1
            self.wake_at = due
            engine = self.group.engine
            engine.at(due, WAKE, self, None if due == engine.now else self.version)

    def fire(self, now: int, version: object) -> None:
        """A wake-up: a version from the heap (stale when the queue slept again since), None from
        ``Engine.soon``."""
        if version is None or version == self.version:
            if self.wake_at == now:
                self.wake_at = -1
            self.dispatch(now)

    def dispatch(self, now: int) -> None:
        """Hand windows to idle servers while ``batching.ready`` says so, then sleep until it will."""
        idle = self.idle
        s = self.group.settings
        times = self.times
        windows = self.group.world.windows
        while idle and self.head < len(times):
            head = self.head
            t, w = next_window(times, head, now, s)
            if t > now:
                self.wake(t)
                return
            end = self.head = head + w
            server = idle.popleft()
            if windows is not None:
                windows.taken(now)
            if not server.take(now, self.taken, times[head:end], self.reqs[head:end], self.sent[head:end]):
                idle.appendleft(server)  # the whole window was dropped: still free
            self.taken += w
        if self.head > _COMPACT and 2 * self.head > len(times):
            self.compact()

    def take_rest(self) -> tuple[list[int], list[int], list[int], list[int]]:
        """Empty the queue; return what was not taken yet (times, reqs, sent, parts)."""
        h = self.head
        rest = (self.times[h:], self.reqs[h:], self.sent[h:], self.parts[h:])
        self.times, self.reqs, self.sent, self.parts, self.head = [], [], [], [], 0
        self.idle.clear()
        self.version += 1
        self.wake_at = -1
        return rest

    def compact(self) -> None:
        h = self.head
        del self.times[:h], self.reqs[:h], self.sent[:h]
        if self.parts:
            del self.parts[:h]
        self.head = 0


_DISPATCHED = object()  # a Server's token: its worker's own time is over, the batch goes to the host


class Server:
    __slots__ = ("group", "queue", "win_t", "win_r", "win_s", "rest", "predict", "base", "spread", "observe", "key", "br", "bs",
                 "busy", "ran_at", "retired", "paused_until", "version", "pending")

    def __init__(self, group: "Group", queue: Queue, paused_until: int = 0) -> None:
        self.group = group
        self.queue = queue
        self.win_t: list[int] = []  # the deferred rest of the current window
        self.win_r: list[int] = []
        self.win_s: list[int] = []
        self.rest: list[tuple] = []  # a mixed window's variants still to come, last first: (latency, t, r, s)
        self.predict = group.predict  # of the variant being worked off
        self.base = group.base
        self.spread = group.spread  # the variant's service time (its spread)
        self.observe = group.observe  # its predictor's observe(b, ns), or None
        self.ran_at = 0  # when the running batch went to the host
        self.key = 0  # completion key of the next sub-batch
        self.br: list[int] = []  # the running batch: requests, produce times
        self.bs: list[int] = []
        self.busy = False
        self.retired = False
        self.paused_until = paused_until  # model load, or a rebalance: takes nothing before
        self.version = 0
        self.pending = (0, 0, None, 1)  # (work, completion key, host, width) of the batch, during the worker's own time

    def take(self, now: int, offset: int, wt: list[int], wr: list[int], ws: list[int]) -> bool:
        self.key = self.queue.key | offset << SUB_BITS
        g = self.group
        mix = g.mix
        if mix is None:
            self.win_t, self.win_r, self.win_s = wt, wr, ws
            self.predict, self.base, self.spread, self.observe = g.predict, g.base, g.spread, g.observe  # in force now
            return self.work(now)
        self.rest = [(p, [wt[i] for i in idx], [wr[i] for i in idx], [ws[i] for i in idx])
                     for p, idx in reversed(mix.split(wr))]
        return self.next_variant(now)

    def next_variant(self, now: int) -> bool:
        """Work off the window's next variants until one runs a batch; False when none does."""
        while self.rest:
            (self.predict, self.base, self.spread, self.observe), self.win_t, self.win_r, self.win_s = self.rest.pop()
            if self.work(now):
                return True
        return False

    def work(self, now: int) -> bool:
        """Start the next sub-batch of the window (``batching.whole_ns``, else ``decide``); False when
        none runs."""
        g = self.group
        dls = list(map(g.deadline, self.win_r))
        lat = whole_ns(dls, now, self.predict, g.settings)
        if lat >= 0:
            self.br, self.bs = self.win_r, self.win_s
            self.win_t = self.win_r = self.win_s = []
        else:
            lat = self.split(decide(dls, now, self.predict, g.settings), now)
            if lat < 0:
                return False
        self.busy = True
        base = self.base[len(self.br)]  # the run is drawn around the profile; ``lat`` is only the prediction
        work = base if g.factor is None else int(base * g.factor(now, base, self.spread))
        if g.dispatch is None:
            self.ran_at = now
            g.host.run(self, work, now, self.key, g.width)
        else:  # the worker's own time first: it holds the replica, not the host's shared cores
            self.pending = (work, self.key, g.host, g.width)
            g.engine.at(now + g.dispatch(), DONE, self, _DISPATCHED, self.key)
        self.key += 1
        return True

    def split(self, d: Decision, now: int) -> int:
        """Log the window's drops, keep ``d.run`` as the batch and ``d.defer`` as the window's rest;
        the batch's predicted latency, or -1 when nothing runs."""
        g, wt, wr, ws = self.group, self.win_t, self.win_r, self.win_s
        if d.drop:
            g.log.drops([wr[i] for i in d.drop], g.stage.index, now, self.predict(1))
        if not d.run:
            self.win_t = self.win_r = self.win_s = []
            return -1
        self.br, self.bs = [wr[i] for i in d.run], [ws[i] for i in d.run]
        defer = d.defer
        self.win_t, self.win_r, self.win_s = [wt[i] for i in defer], [wr[i] for i in defer], [ws[i] for i in defer]
        return d.predicted_ns

    def fire(self, now: int, token: object) -> None:
        """``token`` None: the running batch is done. Else the end of a pause (stale unless current)."""
        if token is _DISPATCHED:
            self.ran_at = now
            work, key, host, width = self.pending
            host.run(self, work, now, key, width)
        elif token is None:
            self.busy = False
            if self.observe is not None:  # the worker's predictor learns from every run (``Latency``)
                self.observe(len(self.br), now - self.ran_at)
            self.group.stage.done(self.br, self.bs, now)
            self.next(now)
        elif token == self.version and not self.busy:
            self.next(now)

    def next(self, now: int) -> None:
        """After a batch or a pause: the rest of the window, else back to the queue (unless retired)."""
        if self.retired and not self.win_r and not self.rest:
            return
        if now < self.paused_until:
            self.pause_until(self.paused_until)
            return
        if self.win_r and self.work(now) or self.rest and self.next_variant(now):
            return
        if not self.retired:
            self.queue.idle.append(self)
            self.queue.poke(now)

    def pause_until(self, t: int) -> None:
        self.paused_until = t
        self.version += 1
        self.group.engine.at(t, WAKE, self, self.version)
