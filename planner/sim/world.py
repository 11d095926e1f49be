"""What every part of one simulation shares: the clock's engine, the host, the log, the random streams,
the Kafka hops, and how a problem and a plan become stages and replica groups (:func:`build`; a
mixed stage becomes the pool it is deployed as).

Random streams, all children of one ``SeedSequence(seed)``: two per stage (routing, fan-out:
``slipstream.planner.sim.stages``), one for transits, one for service-time factors, one for fetch phases. A
stream is drawn by one owner in an order that does not depend on how events interleave, so turning
on one effect leaves the other effects' draws alone.
"""
from __future__ import annotations

from functools import partial
from typing import Mapping, Sequence

import numpy as np

from ...streams import shares
from ...streams.batching import NS_PER_MS, BatchSettings
from ...streams.calibration import key as variant_key
from ..plan import Plan
from ..problem import HardwareOption, Problem
from .engine import Draws, Engine
from .groups import InWorkerGroup, Latency, Mix, PartitionGroup
from .host import Colocated, Dedicated, SharedHost, Windows
from .params import IN_WORKER, HostModel, Network, ServiceTime, Transit
from .record import Log
from .servers import Queue
from .stages import Stage


class World:
    """The shared context of one run (see the module docstring)."""

    def __init__(self, *, seed: int, deadline: list[int], host: HostModel | None, network: Network,
                 service: ServiceTime, activation_ns: int, in_worker_activation_ns: int, pause_ns: int,
                 fanout_dist: str,
                 request_ids: Sequence[str] | None) -> None:
        self._seeds = np.random.SeedSequence(seed)
        net, svc, fetch = (np.random.default_rng(s) for s in self._seeds.spawn(3))
        self.net_rng, self.fetch_rng = net, fetch
        self.engine = Engine()
        self.device = Dedicated(self.engine)  # an accelerator's batches run beside the host's cores
        self.host = self.device if host is None else SharedHost(self.engine, host)
        # the workers' own work per window taken (HostModel.window_cpu_ms), or None
        self.windows = Windows(self.host) if host is not None and host.window_cpu_ms > 0 else None
        self.log = Log()
        self.deadline = deadline
        self.request_ids = request_ids  # what a mixed stage's routing rule reads (None: str(i))
        self.factor = None if service.is_deterministic else service.pace(svc)  # factor(now, base_ns)
        self.service = service
        self.learns = host is not None or not service.is_deterministic  # runs differ from the profile
        # the worker's time per batch (ns), or None; its stream exists only then, so runs without it
        # draw exactly as before
        self.dispatch = Draws(partial(service.dispatch.sample_ns, self.stream())).one if service.has_dispatch else None
        self.network = network
        self.activation_ns = activation_ns
        self.in_worker_activation_ns = in_worker_activation_ns
        self.pause_ns = pause_ns
        self.fanout_dist = fanout_dist
        self._between = _HopTimes(network.between, net)
        self.between_ns = self._between.const  # the constant between-stage transit, None when random

    def runs_on(self, hardware: HardwareOption | None) -> tuple[Dedicated | SharedHost, int]:
        """Where a batch on ``hardware`` runs and the cores it demands there
        (``HardwareOption.host_cores``; None: one): an accelerator's beside the host's cores."""
        cores = 1 if hardware is None else hardware.host_cores
        return (self.host, cores) if cores > 0 else (self.device, 1)

    def colocate(self, arrivals_ns: list[int]) -> None:
        """The per-request work (``HostModel.request_cpu_ms``) of each request the source admitted, at
        its arrival, on the shared host."""
        if isinstance(self.host, SharedHost) and self.host.model.request_cpu_ms > 0:
            Colocated(self.engine, self.host, arrivals_ns)

    def clock(self) -> int:
        """The simulated time (ns): the predictors' clock."""
        return self.engine.now

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


def _latency_of(stage, service: ServiceTime, learn: bool, clock, variant: str, hardware: str,
                max_batch: int) -> Latency:
    curve = stage.variant(variant).latency.get(hardware)
    if curve is None:
        raise Unprofiled(f"stage {stage.name}: variant {variant} has no latency profile on {hardware}")
    return Latency.of(curve, max_batch, service.for_variant(variant_key(variant, hardware)), learn, clock)


class Unprofiled(ValueError):
    """A mixed stage's deployed form runs a variant on hardware it has no latency profile for."""


def _pool(problem: Problem, stage: str, hardware: str, max_batch: int, use: Mapping[str, float], world: World,
          routed: dict[tuple, list[str]], always: bool = False) -> tuple[list[Latency], Mix | None]:
    """Each variant of ``use`` (variant -> share, sorted) at its latency on ``hardware``, and the split
    of the stage's requests among them (``slipstream.streams.shares.choose`` on each id, kept in ``routed`` per
    shares): None for one variant unless ``always``."""
    variants = sorted(v for v, f in use.items() if f > 0)
    tables = []
    for v in variants:
        curve = problem.stage(stage).variant(v).latency.get(hardware)
        if curve is None:
            raise Unprofiled(f"stage {stage} is deployed on {hardware} (its primary assignment's) but variant "
                             f"{v} has no latency profile there")
        tables.append(Latency.of(curve, max_batch, world.service.for_variant(variant_key(v, hardware)),
                                 world.learns, world.clock))
    if len(variants) == 1 and not always:
        return tables, None
    key = tuple(sorted((v, use[v]) for v in variants))
    if key not in routed:
        ids = world.request_ids if world.request_ids is not None else map(str, range(len(world.deadline)))
        routed[key] = [shares.choose(r, dict(key)) for r in ids]
    index = {v: k for k, v in enumerate(variants)}
    return tables, Mix([index[v] for v in routed[key]], tables)


def _shared(problem: Problem, stage: str, hardware: str, group, world: World, routed: dict[tuple, list[str]],
            use: Mapping[str, float]) -> Mix:
    """The pool's split under new shares (``ShareChange``), at the group's max batch now."""
    return _pool(problem, stage, hardware, group.settings.max_batch, use, world, routed, always=True)[1]


def build(problem: Problem, plan: Plan, world: World, scaling: Mapping[str, str], drop_late: bool) -> list[Stage]:
    """One :class:`Stage` per stage in topological order, each with one replica group: its assignment,
    or for a mixed stage the pool it is deployed as (``slipstream.planner.service.stage_configs``): the stage's
    total replicas on the primary assignment's hardware, batch size and timeout, every variant of
    its ``routing`` with its own latency on that hardware, each request on the variant
    ``slipstream.streams.shares.choose`` gives its id (the worker's rule)."""
    names = problem.topo_order
    stages = []
    routed: dict[tuple, list[str]] = {}  # shares -> each request's variant (stages with the same shares share it)
    for i, name in enumerate(names):
        sp = plan.stage(name)
        st = Stage(i, name, world)
        a = sp.primary
        tables, mix = _pool(problem, name, a.hardware, a.max_batch, shares.in_service(sp.routing, a.variant),
                            world, routed)
        settings = BatchSettings.from_ms(a.max_batch, a.batch_timeout_ms, drop_late)
        latency_of = partial(_latency_of, problem.stage(name), world.service, world.learns, world.clock)
        counts = [x.replicas for x in sp.assignments]
        if scaling[name] == IN_WORKER:
            st.group = InWorkerGroup(world, st, settings, tables[0], counts, mix)
        else:
            st.group = PartitionGroup(world, st, settings, tables[0], counts, mix, sp.partitions)
        st.group.latency_of = latency_of
        st.group.mix_of = partial(_shared, problem, name, a.hardware, st.group, world, routed)
        st.group.runs_on = lambda hw: world.runs_on(problem.hardware.get(hw))
        st.group.host, st.group.width = st.group.runs_on(a.hardware)
        stages.append(st)
    index = {name: i for i, name in enumerate(names)}
    for st in stages:
        for e in problem.children(st.name):
            st.add_child(stages[index[e.dst]], e.fanout, e.probability)
    return stages
