"""Replica groups: one per stage, in one of the two scaling modes.

A stage's group is its assignment; for a mixed stage (several assignments) it is the pool the stage
is deployed as (``slipstream.planner.sim.world.build``): the stage's total replicas with the primary
assignment's batching, each window split by variant (:class:`Mix`) and the variants' items worked
off one variant after the other (``slipstream.planner.sim.servers``). A replica change names an assignment
(``ReplicaChange.index``) and sets its count; the pool runs the sum of the counts.

- :class:`InWorkerGroup` (``scaling="in-worker"``, the data plane's replicas inside a worker): one
  worker process, so one consumer and one FIFO for all the group's partitions, with c servers
  (replicas) taking windows from it: a central queue with c servers. A replica change never pauses
  the running replicas; an added one serves ``in_worker_activation`` after the change (a model
  load and warm-up, or a loaded spare replica taken once the control record is in); a removed one
  finishes the window it is on (``slipstream.agents.replicas``) and stops.
- :class:`PartitionGroup` (``scaling="rebalance"``, a process per replica): items go round-robin over
  ``partitions``, partitions go to replicas by Kafka's range assignor, and each replica keeps one FIFO
  of its partitions (not a central queue). A replica change is a consumer rebalance: unconsumed items
  (and the deferred windows of removed replicas) return to their partitions, partitions are
  reassigned (they only grow), every replica pauses ``pause``, and new ones wait for ``activation``
  too (the two overlap: a new replica serves ``max(pause, activation)`` after the change).

Both take a stage's items with ``put(now, vis, reqs, sent)``, and the tuner's replica changes and
share changes (windows taken afterwards split by the new shares) and the re-plans' batching changes
(:meth:`Group.rebatch`: windows taken afterwards use the new max batch, timeout and latency) as events.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping, NamedTuple, Sequence

import numpy as np

from ...streams.batching import BatchSettings
from ...streams.latency import PREDICT_PERCENTILE, PREDICT_WINDOW, LatencyCurve, RecentLatency
from .params import BatchingChange, ReplicaChange, ServiceTime, ShareChange
from .servers import Queue, Server

if TYPE_CHECKING:
    from .stages import Stage
    from .world import World


def range_assign(partitions: int, consumers: int) -> list[int]:
    """Kafka's range assignor for one topic: consecutive ranges, the first ``P % n`` one larger."""
    owner = []
    base, extra = divmod(partitions, consumers)
    for c in range(consumers):
        owner.extend([c] * (base + (1 if c < extra else 0)))
    return owner


class Latency(NamedTuple):
    """A variant's batch latency on its hardware, per batch size b (index 0 unused), in ns: ``base``
    as profiled (what a batch's run is drawn around) and ``predict``, what the agents predict and
    decide with; ``spread``, the variant's service time (``ServiceTime.for_variant``), whose spread
    its runs are drawn with; ``observe(b, ns)``, told every batch's run (None: nothing to learn).

    When runs vary, ``predict`` is the worker's own predictor (``slipstream.streams.latency.RecentLatency``,
    seeded with the same curve) learning from the simulated runs as the worker's learns from its
    real ones: after a slow second it predicts longer and runs smaller batches or drops, as the worker
    does. When runs are exactly ``base`` (``learn`` False: deterministic service on dedicated cores)
    it is ``base`` itself, all that predictor would ever say."""

    predict: Callable[[int], int]
    base: list[int]
    spread: ServiceTime | None = None
    observe: Callable[[int, int], None] | None = None

    @classmethod
    def of(cls, curve: LatencyCurve, max_batch: int, service: ServiceTime, learn: bool = True,
           clock: Callable[[], int] | None = None) -> "Latency":
        """``service`` is the variant's own (``ServiceTime.for_variant``); ``clock``: the simulated
        time, for the predictor's horizon."""
        base = [0] + [int(curve.ns(b)) for b in range(1, max_batch + 1)]
        if not learn:
            return cls(base.__getitem__, base, service)
        learner = RecentLatency(curve, PREDICT_WINDOW, PREDICT_PERCENTILE, clock)
        return cls(learner.predict_ns, base, service, learner.observe)


class Mix:
    """A mixed stage's variants: which one serves each request (``slipstream.streams.shares.choose``, computed by
    ``world.build``) and each one's batch latency on the pool's hardware."""

    __slots__ = ("of", "latencies")

    def __init__(self, of: Sequence[int], latencies: list[Latency]) -> None:
        self.of = of  # request -> variant index
        self.latencies = latencies  # variant index -> its Latency

    def split(self, reqs: Sequence[int]) -> list[tuple[Latency, list[int]]]:
        """A window's items (indices into ``reqs``) per variant, FIFO, variants in the order of their
        first item (``slipstream.agents.window.split_variants``), each with its latency."""
        of, parts = self.of, {}
        for i, r in enumerate(reqs):
            v = of[r]
            if v in parts:
                parts[v].append(i)
            else:
                parts[v] = [i]
        return [(self.latencies[v], idx) for v, idx in parts.items()]


class Group:
    """What the servers of a group read: batching settings, latency table, deadlines, the world."""

    def __init__(self, world: "World", stage: "Stage", settings: BatchSettings, latency: Latency,
                 counts: list[int], mix: Mix | None) -> None:
        self.world = world
        self.stage = stage
        self.settings = settings
        self.latency_of: Callable[[str, str, int], Latency] | None = None  # (variant, hardware, max batch), set by build
        self.mix_of: Callable[[Mapping[str, float]], Mix] | None = None  # shares -> the pool's split, set by build
        self.predict: Callable[[int], int] = latency.predict  # predict(b) -> ns, b in 1..max_batch
        self.base = latency.base  # l(b) as profiled, ns: a batch's run is l(b) x a factor
        self.spread = latency.spread  # the variant's service time: the factor's spread
        self.observe = latency.observe  # the predictor's observe(b, ns), or None
        self.mix = mix  # None: one variant
        self.counts = counts  # replicas per assignment of the stage; the group runs their sum
        self.deadline: Callable[[int], int] = world.deadline.__getitem__
        self.engine = world.engine
        self.host = world.host  # where its batches run, and the cores each demands there (``World.runs_on``)
        self.width = 1
        self.runs_on: Callable[[str], tuple] | None = None  # hardware -> (host, width), set by build
        self.log = world.log
        self.factor = world.factor  # factor(now, l(b)) per batch, or None (deterministic)
        self.dispatch = world.dispatch  # the worker's own time per batch, or None
        self.servers: list[Server] = []

    def fire(self, now: int, change: object) -> None:
        if isinstance(change, BatchingChange):
            self.rebatch(change, now)
            return
        if isinstance(change, ShareChange):  # windows taken from now on split by the new shares
            self.mix = self.mix_of(change.shares)
            return
        assert isinstance(change, ReplicaChange)
        self.counts[change.index] = change.replicas
        self.resize(sum(self.counts), now)

    def rebatch(self, c: BatchingChange, now: int) -> None:
        """New batching (and the latency of the variant and hardware it names) for windows taken from
        now on; a window already taken finishes as it was planned. A mixed pool keeps its split."""
        latency = self.latency_of(c.variant, c.hardware, c.max_batch)
        self.predict, self.base, self.spread, self.observe = latency
        self.settings = BatchSettings.from_ms(c.max_batch, c.batch_timeout_ms, self.settings.drop_late)
        self.host, self.width = self.runs_on(c.hardware)
        for q in {id(s.queue): s.queue for s in self.servers}.values():
            q.version, q.wake_at = q.version + 1, -1  # a wake-up planned under the old timeout is stale
            q.poke(now)

    def resize(self, replicas: int, now: int) -> None:  # pragma: no cover - both subclasses define it
        raise NotImplementedError


class InWorkerGroup(Group):
    def __init__(self, world: "World", stage: "Stage", settings: BatchSettings, latency: Latency,
                 counts: list[int], mix: Mix | None) -> None:
        super().__init__(world, stage, settings, latency, counts, mix)
        self.queue = Queue(self, 0, world.fetch_cadence())
        self.servers = [Server(self, self.queue) for _ in range(sum(counts))]
        self.queue.idle.extend(self.servers)

    def seed(self, reqs: np.ndarray, vis: np.ndarray, sent: np.ndarray) -> None:
        """The source's arrivals, all known up front (the queue reads them up to "now")."""
        self.world.seed_queue(self.queue, reqs, vis, sent)

    def put(self, now: int, vis: list[int], reqs: list[int], sent: list[int]) -> None:
        q = self.queue
        q.put(vis, reqs, sent)
        if q.idle:
            q.poke(now)

    def resize(self, replicas: int, now: int) -> None:
        live = [s for s in self.servers if not s.retired]
        for _ in range(replicas - len(live)):
            srv = Server(self, self.queue)
            srv.pause_until(now + self.world.in_worker_activation_ns)
            self.servers.append(srv)
        for srv in live[replicas:]:  # the newest go first; a busy one finishes its window
            srv.retired = True
            if srv in self.queue.idle:
                self.queue.idle.remove(srv)
        self.servers = [s for s in self.servers if not s.retired or s.busy or s.win_r or s.rest]


class PartitionGroup(Group):
    def __init__(self, world: "World", stage: "Stage", settings: BatchSettings, latency: Latency,
                 counts: list[int], mix: Mix | None, partitions: int) -> None:
        super().__init__(world, stage, settings, latency, counts, mix)
        replicas = sum(counts)
        self.queues_made = 0
        self.partitions = max(partitions, replicas)
        self.owner = range_assign(self.partitions, replicas)
        self.rr = 0  # round-robin partition counter of the group's topic
        self.servers = [self._server() for _ in range(replicas)]
        for srv in self.servers:
            srv.queue.idle.append(srv)

    def _server(self, paused_until: int = 0) -> Server:
        self.queues_made += 1
        return Server(self, Queue(self, self.queues_made - 1, self.world.fetch_cadence()), paused_until)

    def seed(self, reqs: np.ndarray, vis: np.ndarray, sent: np.ndarray) -> None:
        part = np.arange(reqs.size) % self.partitions
        self.rr = int(reqs.size)
        owner = np.asarray(self.owner)[part]
        for ri, srv in enumerate(self.servers):
            sel = owner == ri
            self.world.seed_queue(srv.queue, reqs[sel], vis[sel], sent[sel], part[sel])

    def put(self, now: int, vis: list[int], reqs: list[int], sent: list[int]) -> None:
        parts, owner, servers, rr = self.partitions, self.owner, self.servers, self.rr
        touched = []
        for v, r, s in zip(vis, reqs, sent):
            p = rr % parts
            rr += 1
            q = servers[owner[p]].queue
            q.put_one(v, r, s, p)
            if q.idle and q not in touched:
                touched.append(q)
        self.rr = rr
        for q in touched:
            q.poke(now)

    def resize(self, replicas: int, now: int) -> None:
        pool_t: list[int] = []
        pool_r: list[int] = []
        pool_s: list[int] = []
        pool_p: list[int] = []
        for srv in self.servers:
            t, r, s, p = srv.queue.take_rest()
            pool_t += t
            pool_r += r
            pool_s += s
            pool_p += p
        keep = self.servers[:replicas]
        for srv in self.servers[replicas:]:
            srv.retired = True  # finishes its running batch; its deferred items go back to Kafka
            for _, wt, wr, ws in [(None, srv.win_t, srv.win_r, srv.win_s), *srv.rest]:
                pool_t += wt
                pool_r += wr
                pool_s += ws
                pool_p += [0] * len(wt)
            srv.win_t, srv.win_r, srv.win_s, srv.rest = [], [], [], []
        world = self.world
        kept = len(keep)
        while len(keep) < replicas:
            keep.append(self._server())
        self.servers = keep
        self.partitions = max(self.partitions, replicas)  # partitions only grow
        self.owner = range_assign(self.partitions, replicas)
        for i in sorted(range(len(pool_t)), key=pool_t.__getitem__):
            q = keep[self.owner[pool_p[i] % self.partitions]].queue
            q.times.append(pool_t[i])
            q.reqs.append(pool_r[i])
            q.sent.append(pool_s[i])
            q.parts.append(pool_p[i])
        for k, srv in enumerate(keep):
            srv.pause_until(now + (world.pause_ns if k < kept else max(world.pause_ns, world.activation_ns)))

