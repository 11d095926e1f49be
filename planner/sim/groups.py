"""Replica groups: one per assignment of a stage, in one of the two scaling modes.

- :class:`InstanceGroup` (``scaling="instances"``, the data plane's model instances): one worker
  process, so one consumer and one FIFO for all the group's partitions, with c servers (instances)
  taking windows from it: a central queue with c servers. A replica change is an instance change:
  running instances never pause; an added one serves from ``activation`` after the change (model load
  and warm-up); a removed one finishes the window it is on (``agents.instances``) and stops.
- :class:`PartitionGroup` (``scaling="rebalance"``, a process per replica): items go round-robin over
  ``partitions``, partitions go to replicas by Kafka's range assignor, and each replica keeps one FIFO
  of its partitions (not a central queue). A replica change is a consumer rebalance: unconsumed items
  (and the deferred windows of removed replicas) return to their partitions, partitions are
  reassigned (they only grow), every replica pauses ``pause``, and new ones wait for ``activation``
  too (the two overlap: a new replica serves ``max(pause, activation)`` after the change).

Both take a stage's items with ``put(now, vis, reqs, sent)`` and the tuner's changes as events.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from planner.sim.params import ReplicaChange
from planner.sim.servers import Queue, Server
from streams.batching import BatchSettings

if TYPE_CHECKING:
    from planner.sim.stages import Stage
    from planner.sim.world import World


def range_assign(partitions: int, consumers: int) -> list[int]:
    """Kafka's range assignor for one topic: consecutive ranges, the first ``P % n`` one larger."""
    owner = []
    base, extra = divmod(partitions, consumers)
    for c in range(consumers):
        owner.extend([c] * (base + (1 if c < extra else 0)))
    return owner


class Group:
    """What the servers of a group read: batching settings, latency table, deadlines, the world."""

    def __init__(self, world: "World", stage: "Stage", index: int, settings: BatchSettings,
                 table: list[int]) -> None:
        self.world = world
        self.stage = stage
        self.index = index  # among the stage's groups
        self.settings = settings
        self.predict: Callable[[int], int] = table.__getitem__  # predict(b) -> ns, b in 1..max_batch
        self.deadline: Callable[[int], int] = world.deadline.__getitem__
        self.engine = world.engine
        self.host = world.host
        self.log = world.log
        self.factor = world.factor  # a service-time factor per batch, or None (deterministic)
        self.margin = world.predict_margin  # predict(b) = l(b) x margin; a batch's work is l(b) x factor
        self.servers: list[Server] = []

    def fire(self, now: int, change: object) -> None:
        assert isinstance(change, ReplicaChange)
        self.resize(change.replicas, now)

    def resize(self, replicas: int, now: int) -> None:  # pragma: no cover - both subclasses define it
        raise NotImplementedError


class InstanceGroup(Group):
    def __init__(self, world: "World", stage: "Stage", index: int, settings: BatchSettings, table: list[int],
                 replicas: int) -> None:
        super().__init__(world, stage, index, settings, table)
        self.queue = Queue(self, 0, world.fetch_cadence())
        self.servers = [Server(self, self.queue) for _ in range(replicas)]
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
            srv.pause_until(now + self.world.activation_ns)
            self.servers.append(srv)
        for srv in live[replicas:]:  # the newest go first; a busy one finishes its window
            srv.retired = True
            if srv in self.queue.idle:
                self.queue.idle.remove(srv)
        self.servers = [s for s in self.servers if not s.retired or s.busy or s.win_r]


class PartitionGroup(Group):
    def __init__(self, world: "World", stage: "Stage", index: int, settings: BatchSettings, table: list[int],
                 replicas: int, partitions: int) -> None:
        super().__init__(world, stage, index, settings, table)
        self.queues_made = 0
        self.partitions = partitions
        self.owner = range_assign(partitions, replicas)
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
            pool_t += srv.win_t
            pool_r += srv.win_r
            pool_s += srv.win_s
            pool_p += [0] * len(srv.win_t)
            srv.win_t, srv.win_r, srv.win_s = [], [], []
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

