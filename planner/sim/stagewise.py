"""Stage by stage: the estimator's fast path, for runs in which nothing couples the stages in time.

Without a shared host (``HostModel``), a tuner schedule, random service times, random transits or
fetch cadences, what happens at a stage depends only on the items produced to it. So the stages can
run one after another in topological order, each on its complete input, and a queue needs no event
heap: a window starts when ``next_window`` says (``batching.ready`` agreeing, ``window_size`` items),
at the earliest on the first free server and never before the previous window (FIFO); it runs
whole when ``batching.whole_ns`` says so (``decide``'s common case, no ``Decision`` built), else
its sub-batches follow one another by ``batching.decide`` (a mixed stage's window: each variant's
items in turn, ``groups.Mix``). With deterministic service,
which server runs a window changes nothing, so the servers are just a heap of free times.

What a stage produces is handed to its children in the order the event loop would produce it
(completion time, then completion key), through the same ``Stage.done`` code when fan-out or
branches draw random numbers, vectorised for a plain chain edge or a sink (no draws). The result is
the event loop's, exactly (``tests/unit/planner/test_stagewise.py`` compares them on random
problems); ``slipstream.planner.estimator.simulate`` picks this path whenever :func:`applies`.
"""
from __future__ import annotations

import heapq
from array import array
from typing import Sequence

import numpy as np

from ...streams.batching import decide, whole_ns
from .groups import InWorkerGroup, PartitionGroup
from .params import HostModel, Network, ReplicaChange, ServiceTime
from .servers import SUB_BITS, next_window
from .stages import Stage
from .world import World

CLIENT = -1  # the producer of the source stage's items


def applies(*, host: HostModel | None, schedule: Sequence[ReplicaChange], service: ServiceTime,
            network: Network) -> bool:
    transits = (network.ingress, network.between, network.to_join, network.to_results)
    return (host is None and not schedule and service.is_deterministic and not service.has_dispatch
            and network.fetch_interval_ms == 0
            and all(t.is_constant for t in transits))


class QueueRun:
    """What one queue's loop produced: its batches (end, window offset, sub-batch, size) and the
    positions in the queue of each batch's items. A window run whole (the common case) is one batch
    of consecutive positions, kept as (end, offset, size) alone."""

    __slots__ = ("fin", "off", "n", "part_fin", "part_key", "part_n", "part_pos", "windows")

    def __init__(self) -> None:
        self.fin, self.off, self.n = array("q"), array("q"), array("q")  # numpy reads them without a copy
        self.part_fin: list[int] = []
        self.part_key: list[int] = []
        self.part_n: list[int] = []
        self.part_pos: list[int] = []
        self.windows = 0

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(end, key, size) per batch and the queue positions of all their items, batch after batch."""
        n = np.frombuffer(self.n, dtype=np.int64)
        off = np.frombuffer(self.off, dtype=np.int64)
        pos = np.repeat(off - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))
        return (np.concatenate([np.frombuffer(self.fin, dtype=np.int64), np.asarray(self.part_fin, dtype=np.int64)]),
                np.concatenate([off << SUB_BITS, np.asarray(self.part_key, dtype=np.int64)]),
                np.concatenate([n, np.asarray(self.part_n, dtype=np.int64)]),
                np.concatenate([pos, np.asarray(self.part_pos, dtype=np.int64)]))


class Completions:
    """A stage's batches: per batch its end, queue, key and size; per item (batch
    after batch, in the order the columns hold the batches) its index in the stage's input."""

    def __init__(self, parts: list[tuple[np.ndarray, ...]]) -> None:
        cols = list(zip(*parts)) if parts else [()] * 5
        self.fin, self.qkey, self.key, self.n, self.items = (
            np.concatenate(c) if c else np.zeros(0, dtype=np.int64) for c in cols)

    def order(self) -> np.ndarray:
        """Batch indices in the event loop's order: time, then (queue, offset, sub-batch)."""
        return np.lexsort((self.key, self.qkey, self.fin))


def run(world: World, stages: list[Stage], reqs: np.ndarray, vis: np.ndarray, arr_ns: np.ndarray) -> None:
    """Run every stage in topological order (requests ``reqs``, fetchable at the source at ``vis``,
    sent at ``arr_ns``); the log fills as in the event loop."""
    for st in stages:
        st.inbox = []
    stages[0].inbox = [(CLIENT, vis, reqs, arr_ns)]
    deadline = np.asarray(world.deadline, dtype=np.int64)
    for st in stages:
        inbox, st.inbox = st.inbox, None
        if inbox:
            vis, reqs, sent = _merge(inbox)
            _emit(world, st, serve_stage(st, vis, reqs, deadline), reqs, sent)


def _merge(inbox: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Everything produced to a stage, in the order the event loop puts it in the stage's queues:
    produce time, then producer (stage order), then the producer's own order."""
    vis, reqs, sent = (np.concatenate([np.asarray(e[k], dtype=np.int64) for e in inbox]) for k in (1, 2, 3))
    if len(inbox) == 1:
        return vis, reqs, sent
    src = np.repeat([e[0] for e in inbox], [len(e[2]) for e in inbox])
    order = np.lexsort((np.arange(reqs.size), src, sent))
    return vis[order], reqs[order], sent[order]


def serve_stage(st: Stage, vis: np.ndarray, reqs: np.ndarray, deadline: np.ndarray) -> Completions:
    """Put the stage's input in its group's queues (as ``put`` does) and serve each."""
    parts = []
    g = st.group
    idx = np.arange(reqs.size)
    if isinstance(g, InWorkerGroup):
        queues = [(0, idx, len(g.servers))]
    else:
        assert isinstance(g, PartitionGroup)
        owner = np.asarray(g.owner)[idx % g.partitions]
        queues = [(qi, idx[owner == qi], 1) for qi in range(len(g.servers))]
    for qi, q, servers in queues:
        run = serve_queue(g, vis[q].tolist(), deadline[reqs[q]].tolist(), reqs[q], servers)
        fin, key, n, pos = run.arrays()
        parts.append((fin, np.full(fin.size, qi), key, n, q[pos]))
        g.engine.events += run.windows + fin.size  # what the event loop fires: wake-ups and completions
    return Completions(parts)


def serve_queue(g: InWorkerGroup | PartitionGroup, times: list[int], dls: list[int], reqs: np.ndarray,
                servers: int) -> QueueRun:
    """One queue with all its items known, worked off by ``servers`` identical servers: each window
    starts at ``next_window`` from the first free server, never before the previous window."""
    s, predict, mix, out, replace = g.settings, g.predict, g.mix, QueueRun(), heapq.heapreplace
    add_fin, add_off, add_n = out.fin.append, out.off.append, out.n.append
    free = [0] * servers  # heap of the servers' free times
    n, h, t = len(times), 0, 0
    while h < n:
        t, w = next_window(times, h, t if t > free[0] else free[0], s)
        e = h + w
        if mix is not None:
            end, sub = t, 0
            out.windows += 1
            for (p, *_), idx in mix.split(reqs[h:e].tolist()):
                pos = [h + i for i in idx]
                end, sub = _work_off(g, p, end, h, sub, pos, dls, reqs, out)
        elif (lat := whole_ns(dls[h:e], t, predict, s)) >= 0:  # the whole window in one batch: the common case
            end = t + lat
            add_fin(end)
            add_off(h)
            add_n(w)
        else:
            out.windows += 1
            end = _work_off(g, predict, t, h, 0, list(range(h, e)), dls, reqs, out)[0]
        replace(free, end)
        h = e
    out.windows += len(out.fin)
    return out


def _work_off(g: InWorkerGroup | PartitionGroup, predict, t: int, off: int, sub: int, pos: list[int],
              dls: list[int], reqs: np.ndarray, out: QueueRun) -> tuple[int, int]:
    """Items of the window at queue offset ``off`` (queue positions ``pos``) from ``t`` with one
    variant's ``predict``, the window's batches so far ``sub``: drops, then sub-batch after sub-batch;
    (when the server is free again, the window's batches now)."""
    while pos:
        d = decide([dls[p] for p in pos], t, predict, g.settings)
        if d.drop:
            g.log.drops(reqs[[pos[i] for i in d.drop]].tolist(), g.stage.index, t, predict(1))
        if not d.run:
            break
        t = d.finish_ns
        out.part_fin.append(t)
        out.part_key.append(off << SUB_BITS | sub)
        out.part_n.append(len(d.run))
        out.part_pos.extend(pos[i] for i in d.run)
        pos, sub = [pos[i] for i in d.defer], sub + 1
    return t, sub


def _emit(world: World, st: Stage, comp: Completions, reqs: np.ndarray, sent: np.ndarray) -> None:
    """Hand the stage's finished batches on: vectorised for a chain edge or a sink, else batch by
    batch through ``Stage.done`` (its fan-out draws, in completion order)."""
    if not comp.fin.size:
        return
    order = comp.order()
    start = np.cumsum(comp.n) - comp.n
    r_items, s_items = reqs[comp.items], sent[comp.items]
    if st.chain is None and st.kids:
        rl, sl, fl = r_items.tolist(), s_items.tolist(), comp.fin.tolist()
        for i, a, b in zip(order.tolist(), start[order].tolist(), (start + comp.n)[order].tolist()):
            st.done(rl[a:b], sl[a:b], fl[i])
        return
    ends = np.repeat(comp.fin, comp.n)
    world.log.visit_chunk(st.index, ends, r_items, s_items, comp.fin.size)
    if st.chain is None:
        world.log.ends_chunk(ends, r_items)
        return
    n = comp.n[order]
    items = np.repeat(start[order] - np.cumsum(n) + n, n) + np.arange(r_items.size)
    produced = ends[items]
    st.chain.receive(0, produced + world.between_ns, r_items[items], produced, st.index)
