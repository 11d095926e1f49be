"""The estimator: a discrete-event simulator of exactly what the stage agents do.

What is simulated (the agent algorithm is the one documented at the top of ``streams/batching.py``;
this module calls its functions, it does not re-implement them):

- Every stage assignment (replica group) reads its own topic of ``partitions`` partitions. Items are
  spread over partitions round-robin; partitions are given to replicas by Kafka's range assignor;
  each replica has one FIFO of the items of its partitions (not a central queue).
- A replica that is free takes a window when ``batching.ready`` says so (max batch queued, or the
  oldest item waited the batch timeout), of ``batching.window_size`` items, then works it off in
  sub-batches decided by ``batching.decide`` (deadline drops, largest prefix that meets the earliest
  deadline, the rest deferred). A sub-batch of b takes the profiled latency l(b) (the curve's high
  percentile, the same number the agents use to predict).
- At a batch's end each item goes on along every child edge with the edge's probability, as k child
  items where k has mean ``fanout`` (``round``: floor + Bernoulli(fraction), or ``poisson``); a stage
  with several assignments routes each item to one of them by weight. Randomness comes from one
  seeded ``numpy.random.Generator``.
- Join: a request is done when all its fragments are done, and dropped if any fragment was dropped.
- Replica changes (a tuner schedule of time-stamped :class:`ReplicaChange` s) cause a consumer
  rebalance: unconsumed items go back to their partitions, partitions are reassigned, and every
  replica of the group pauses ``activation_s`` before taking its next window.

The event loop follows simpy's core: a heap keyed ``(time, priority, seq)`` in integer nanoseconds,
the producers' clock. Source arrivals are not heap events: each replica's future arrivals are a
sorted list it reads up to "now", so the heap holds only wake-ups and batch completions.
"""
from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from planner.plan import Plan
from planner.problem import Problem
from planner.results import QueryResult, SimResult, nearest_rank  # noqa: F401  (re-exported)
from streams.batching import NS_PER_MS, BatchSettings, decide, flush_due_ns, ready, window_size

_DONE, _CHANGE, _WAKE = 0, 1, 2
NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class ReplicaChange:
    """At ``time_s`` the assignment ``index`` of ``stage`` runs ``replicas`` replicas."""

    time_s: float
    stage: str
    replicas: int
    index: int = 0


class _Replica:
    __slots__ = ("group", "times", "reqs", "parts", "head", "busy", "win_t", "win_r", "version",
                 "paused_until", "alive", "wake_at")

    def __init__(self, group: "_Group") -> None:
        self.group = group
        self.times: list[int] = []
        self.reqs: list[int] = []
        self.parts: list[int] = []
        self.head = 0
        self.busy = False
        self.win_t: list[int] = []  # deferred part of the current window
        self.win_r: list[int] = []
        self.version = 0
        self.paused_until = 0
        self.alive = True
        self.wake_at = -1  # time of the pending wake-up, -1 when none


class _Group:
    __slots__ = ("stage_idx", "settings", "predict", "partitions", "replicas", "owner", "rr")

    def __init__(self, stage_idx: int, settings: BatchSettings, curve_ns: list[int], partitions: int,
                 replicas: int) -> None:
        self.stage_idx = stage_idx
        self.settings = settings
        self.predict = curve_ns.__getitem__  # predict(b) -> ns, b in 1..max_batch
        self.partitions = partitions
        self.replicas = [_Replica(self) for _ in range(replicas)]
        self.owner = range_assign(partitions, replicas)
        self.rr = 0


def range_assign(partitions: int, consumers: int) -> list[int]:
    """Kafka's range assignor for one topic: consecutive ranges, the first ``P % n`` one larger."""
    owner = []
    base, extra = divmod(partitions, consumers)
    for c in range(consumers):
        owner.extend([c] * (base + (1 if c < extra else 0)))
    return owner


def simulate(problem: Problem, plan: Plan, arrivals_s: np.ndarray | None = None, *,
             seed: int | None = None, schedule: Sequence[ReplicaChange] = (),
             activation_s: float | None = None, hop_ms: float | None = None, fanout_dist: str = "round",
             drop_late: bool = True) -> SimResult:
    """Replay ``arrivals_s`` (seconds, sorted) through ``plan`` and return per-request results."""
    arr = np.sort(np.asarray(problem.arrivals_s if arrivals_s is None else arrivals_s, dtype=float))
    rng = np.random.default_rng(problem.seed if seed is None else seed)
    act_ns = int((problem.activation_s if activation_s is None else activation_s) * NS_PER_S)
    hop_ns = int((problem.hop_ms if hop_ms is None else hop_ms) * NS_PER_MS)
    slo_ns = int(problem.slo_ms * NS_PER_MS)
    names = problem.topo_order
    sidx = {s: i for i, s in enumerate(names)}
    n_st = len(names)
    n = int(arr.size)

    groups: list[list[_Group]] = []
    weights: list[np.ndarray] = []
    for s in names:
        sp = plan.stage(s)
        gl = []
        for a in sp.assignments:
            curve = problem.stage(s).variant(a.variant).latency[a.hardware]
            settings = BatchSettings.from_ms(a.max_batch, a.batch_timeout_ms, drop_late)
            table = [0] + [curve.ns(b) for b in range(1, a.max_batch + 1)]
            parts = max(sp.partitions, a.replicas)
            gl.append(_Group(sidx[s], settings, table, parts, a.replicas))
        groups.append(gl)
        w = np.array([max(a.weight, 0.0) for a in sp.assignments], dtype=float)
        weights.append(np.cumsum(w / w.sum()) if w.sum() > 0 else np.linspace(1, 1, len(w)))
    children = [[(sidx[e.dst], e.fanout, e.probability) for e in problem.children(s)] for s in names]

    arr_ns = (arr * NS_PER_S).astype(np.int64)
    arrival = arr_ns.tolist()
    deadline = (arr_ns + slo_ns).tolist()
    outstanding = [1] * n
    finish = [0] * n
    dropped = [False] * n
    drop_stage = [-1] * n
    drop_info = [(0, 0, 0)] * n
    res = [-1] * (n * n_st)  # residence ns per (request, stage); -1 = not visited

    heap: list = []
    seq = 0

    def push(t: int, prio: int, payload) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(heap, (t, prio, seq, payload))

    # source arrivals: group by weight, partition round-robin, owner by range assignment
    src = sidx[problem.source]
    sg = groups[src]
    pick = (np.searchsorted(weights[src], rng.random(n), side="right").clip(0, len(sg) - 1)
            if len(sg) > 1 else np.zeros(n, dtype=np.int64))
    for gi, g in enumerate(sg):
        ids = np.flatnonzero(pick == gi)
        part = np.arange(ids.size) % g.partitions
        g.rr = int(ids.size)
        owner = np.asarray(g.owner)[part]
        for ri, rep in enumerate(g.replicas):
            sel = owner == ri
            rep.times = arr_ns[ids[sel]].tolist()
            rep.reqs = ids[sel].tolist()
            rep.parts = part[sel].tolist()
            if rep.times:
                push(rep.times[0], _WAKE, (rep, 0))
    for c in sorted(schedule, key=lambda c: c.time_s):
        push(int(c.time_s * NS_PER_S), _CHANGE, c)

    batches = 0
    events = 0

    def start(rep: _Replica, now: int) -> None:
        """Take and run the next sub-batch if the replica is free (the agent loop, one step)."""
        nonlocal batches
        g = rep.group
        s = g.settings
        while True:
            if rep.busy or not rep.alive:
                return
            if now < rep.paused_until:
                rep.version += 1
                rep.wake_at = rep.paused_until
                push(rep.paused_until, _WAKE, (rep, rep.version))
                return
            if not rep.win_t:
                head = rep.head
                times = rep.times
                queued = bisect_right(times, now, head) - head
                if queued == 0 or not ready(queued, times[head], now, s):
                    if head == len(times):
                        return
                    # sleep until the window would be ready given the arrivals known so far:
                    # the oldest item's timeout or the arrival that fills a max batch
                    due = flush_due_ns(times[head], s)
                    full = head + s.max_batch - 1
                    if full < len(times) and times[full] < due:
                        due = times[full]
                    if rep.wake_at != due:  # later arrivals can only bring the wake forward
                        rep.version += 1
                        rep.wake_at = due
                        push(due, _WAKE, (rep, rep.version))
                    return
                w = window_size(queued, s)
                rep.win_t = times[head:head + w]
                rep.win_r = rep.reqs[head:head + w]
                rep.head = head + w
            wt, wr = rep.win_t, rep.win_r
            d = decide([deadline[r] for r in wr], now, g.predict, s)
            if d.drop:
                pred1 = g.predict(1)
                for i in d.drop:
                    r = wr[i]
                    if not dropped[r]:
                        dropped[r] = True
                        drop_stage[r] = g.stage_idx
                        drop_info[r] = (deadline[r], now, pred1)
                    outstanding[r] -= 1
                    if outstanding[r] == 0:
                        finish[r] = now
            run = d.run
            if run:
                if len(run) == len(wt):
                    bt, br = wt, wr
                    rep.win_t, rep.win_r = [], []
                else:
                    bt = [wt[i] for i in run]
                    br = [wr[i] for i in run]
                    rep.win_t = [wt[i] for i in d.defer]
                    rep.win_r = [wr[i] for i in d.defer]
                rep.busy = True
                batches += 1
                push(d.finish_ns, _DONE, (rep, bt, br))
                return
            rep.win_t, rep.win_r = [], []

    def send(stage: int, reqs: list[int], counts: list[int] | None, t: int, touched: set) -> None:
        """Produce ``counts[j]`` child items of ``reqs[j]`` (1 each when None) to a stage's topic."""
        gl = groups[stage]
        if counts is not None:
            reqs = [r for r, c in zip(reqs, counts) for _ in range(c)]
        if not reqs:
            return
        if len(gl) == 1:
            g = gl[0]
            parts, owner, reps, rr = g.partitions, g.owner, g.replicas, g.rr
            for r in reqs:
                p = rr % parts
                rr += 1
                rep = reps[owner[p]]
                rep.times.append(t)
                rep.reqs.append(r)
                rep.parts.append(p)
                touched.add(rep)
            g.rr = rr
            return
        pick = np.searchsorted(weights[stage], rng.random(len(reqs)), "right").clip(0, len(gl) - 1).tolist()
        for gi, r in zip(pick, reqs):
            g = gl[gi]
            p = g.rr % g.partitions
            g.rr += 1
            rep = g.replicas[g.owner[p]]
            rep.times.append(t)
            rep.reqs.append(r)
            rep.parts.append(p)
            touched.add(rep)

    def finish_batch(rep: _Replica, now: int, bt: list[int], br: list[int]) -> None:
        rep.busy = False
        si = rep.group.stage_idx
        for t, r in zip(bt, br):
            k = r * n_st + si
            if now - t > res[k]:
                res[k] = now - t
        kids = children[si]
        touched: set = set()
        m = len(br)
        if len(kids) == 1 and kids[0][1] == 1.0 and kids[0][2] == 1.0:
            send(kids[0][0], br, None, now + hop_ns, touched)  # a chain edge: one child per item
        else:
            total = [0] * m
            for dst, fanout, prob in kids:
                if fanout == 1.0 and prob == 1.0:
                    send(dst, br, None, now + hop_ns, touched)
                    total = [x + 1 for x in total]
                    continue
                if fanout_dist == "poisson":
                    k = rng.poisson(fanout, m)
                else:
                    base = math.floor(fanout)
                    k = base + (rng.random(m) < fanout - base)
                if prob < 1.0:
                    k = k * (rng.random(m) < prob)
                k = k.tolist()
                send(dst, br, k, now + hop_ns, touched)
                total = [x + y for x, y in zip(total, k)]
            # each item's fragment ends here and its k children start: outstanding += k - 1
            for r, k in zip(br, total):
                if k != 1:
                    outstanding[r] += k - 1
                    if outstanding[r] == 0:
                        finish[r] = now
        for other in touched:
            if not other.busy:
                start(other, now)
        start(rep, now)

    def rebalance(c: ReplicaChange, now: int) -> None:
        g = groups[sidx[c.stage]][c.index]
        pool_t: list[int] = []
        pool_r: list[int] = []
        pool_p: list[int] = []
        for rep in g.replicas:
            pool_t += rep.times[rep.head:]
            pool_r += rep.reqs[rep.head:]
            pool_p += rep.parts[rep.head:]
            rep.times, rep.reqs, rep.parts, rep.head = [], [], [], 0
        keep = g.replicas[:c.replicas]
        for rep in g.replicas[c.replicas:]:
            rep.alive = False  # finishes its in-flight batch; deferred items go back to Kafka
            for t, r in zip(rep.win_t, rep.win_r):
                pool_t.append(t)
                pool_r.append(r)
                pool_p.append(0)
            rep.win_t, rep.win_r = [], []
        while len(keep) < c.replicas:
            keep.append(_Replica(g))
        g.replicas = keep
        g.partitions = max(g.partitions, c.replicas)  # partitions only grow
        g.owner = range_assign(g.partitions, c.replicas)
        order = sorted(range(len(pool_t)), key=pool_t.__getitem__)
        for i in order:
            rep = g.replicas[g.owner[pool_p[i] % g.partitions]]
            rep.times.append(pool_t[i])
            rep.reqs.append(pool_r[i])
            rep.parts.append(pool_p[i])
        for rep in g.replicas:
            rep.paused_until = rep.wake_at = now + act_ns
            rep.version += 1
            push(rep.paused_until, _WAKE, (rep, rep.version))

    pop = heapq.heappop
    while heap:
        now, prio, _, payload = pop(heap)
        events += 1
        if prio == _WAKE:
            rep, version = payload
            if version == rep.version and not rep.busy:
                rep.wake_at = -1
                start(rep, now)
        elif prio == _DONE:
            rep, bt, br = payload
            finish_batch(rep, now, bt, br)
        else:
            rebalance(payload, now)

    fin = np.asarray(finish, dtype=np.int64)
    drop = np.asarray(dropped, dtype=bool)
    lat = np.where(drop, np.nan, (fin - arr_ns) / NS_PER_MS)
    stage = np.asarray(res, dtype=float).reshape(n, n_st) if n else np.zeros((0, n_st))
    stage = np.where(stage < 0, np.nan, stage / NS_PER_MS)
    return SimResult(problem.slo_ms, names, arr, lat, drop, np.asarray(drop_stage, dtype=np.int16),
                     np.asarray(drop_info, dtype=np.int64).reshape(n, 3), stage, batches, events)
