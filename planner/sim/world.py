"""What every part of one simulation shares: the clock's engine, the host, the log, the random streams,
the Kafka hops, and how a problem and a plan become stages and replica groups (:func:`build`).

Random streams, all children of one ``SeedSequence(seed)``: two per stage (routing, fan-out:
``planner.sim.stages``), one for transits, one for service-time factors, one for fetch phases. A
stream is drawn by one owner in an order that does not depend on how events interleave, so turning
on one effect leaves the other effects' draws alone.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from planner.plan import Plan
from planner.problem import Problem
from planner.sim.engine import Draws, Engine
from planner.sim.groups import InstanceGroup, PartitionGroup
from planner.sim.host import Dedicated, SharedHost
from planner.sim.params import HostModel, Network, ServiceTime, Transit
from planner.sim.record import Log
from planner.sim.servers import Queue
from planner.sim.stages import Stage
from streams.batching import NS_PER_MS, BatchSettings
from streams.latency import PREDICT_PERCENTILE, PREDICT_WINDOW


class World:
    """The shared context of one run (see the module docstring)."""

    def __init__(self, *, seed: int, deadline: list[int], host: HostModel | None, network: Network,
                 service: ServiceTime, activation_ns: int, pause_ns: int, fanout_dist: str) -> None:
        self._seeds = np.random.SeedSequence(seed)
        net, svc, fetch = (np.random.default_rng(s) for s in self._seeds.spawn(3))
        self.net_rng, self.fetch_rng = net, fetch
        self.engine = Engine()
        self.host = Dedicated(self.engine) if host is None else SharedHost(self.engine, host)
        self.log = Log()
        self.deadline = deadline
        self.factor = None if service.is_deterministic else service.pace(svc)  # factor(now)
        self.predict_margin = service.agent_factor(PREDICT_WINDOW, PREDICT_PERCENTILE)  # what agents predict
        self.network = network
        self.activation_ns = activation_ns
        self.pause_ns = pause_ns
        self.fanout_dist = fanout_dist
        self._between = _HopTimes(network.between, net)
        self.between_ns = self._between.const  # the constant between-stage transit, None when random

    def stream(self) -> np.random.Generator:
        """A new independent generator (the stages', in build order)."""
        return np.random.default_rng(self._seeds.spawn(1)[0])

    def fetch_cadence(self) -> tuple[int, int] | None:
        """A new consumer's (fetch interval, phase), or None when items are visible on arrival."""
        interval = self.network.fetch_interval_ns
        return (interval, int(self.fetch_rng.integers(interval))) if interval > 0 else None

    def hop(self, now: int, reqs: list[int]) -> tuple[list[int], list[int]]:
        """Items produced at ``now`` between stages: when each is fetchable, in that order."""
        return self._between.after(now, reqs)

    def seed_queue(self, q: Queue, reqs: np.ndarray, vis: np.ndarray, sent: np.ndarray,
                   parts: np.ndarray | None = None) -> None:
        """Fill a queue with items known up front (the source's arrivals) and wake it at the first."""
        vis = q.visible(vis)
        order = np.argsort(vis, kind="stable")
        q.times, q.reqs, q.sent = vis[order].tolist(), reqs[order].tolist(), sent[order].tolist()
        q.parts = [] if parts is None else parts[order].tolist()
        q.head = 0
        q.poke(0)


class _HopTimes:
    """Fetchable times of items produced together: a constant fast path, else one draw per item."""

    __slots__ = ("const", "draws")

    def __init__(self, transit: Transit, rng: np.random.Generator) -> None:
        self.const = int(round(transit.mean_ms * NS_PER_MS)) if transit.is_constant else None
        self.draws = None if transit.is_constant else Draws(lambda n: transit.sample_ns(rng, n))

    def after(self, now: int, reqs: list[int]) -> tuple[list[int], list[int]]:
        if self.const is not None:
            return [now + self.const] * len(reqs), reqs
        vis = [now + d for d in self.draws.take(len(reqs))]
        if len(reqs) == 1:
            return vis, reqs
        order = sorted(range(len(reqs)), key=vis.__getitem__)
        return [vis[i] for i in order], [reqs[i] for i in order]


def build(problem: Problem, plan: Plan, world: World, scaling: Mapping[str, str], drop_late: bool) -> list[Stage]:
    """One :class:`Stage` per stage in topological order, each with a replica group per assignment."""
    names = problem.topo_order
    stages = []
    for i, name in enumerate(names):
        sp = plan.stage(name)
        st = Stage(i, name, world, [a.weight for a in sp.assignments])
        for a in sp.assignments:
            curve = problem.stage(name).variant(a.variant).latency[a.hardware]
            settings = BatchSettings.from_ms(a.max_batch, a.batch_timeout_ms, drop_late)
            table = [0] + [int(curve.ns(b) * world.predict_margin) for b in range(1, a.max_batch + 1)]
            gi = len(st.groups)
            if scaling[name] == "instances":
                st.groups.append(InstanceGroup(world, st, gi, settings, table, a.replicas))
            else:
                st.groups.append(PartitionGroup(world, st, gi, settings, table, a.replicas,
                                                max(sp.partitions, a.replicas)))
        stages.append(st)
    index = {name: i for i, name in enumerate(names)}
    for st in stages:
        for e in problem.children(st.name):
            st.add_child(stages[index[e.dst]], e.fanout, e.probability)
    return stages
