"""Replica pool: the model replicas a config needs (``slipstream.agents.replicas``, ``slipstream.streams.placement``), each with
an executor per variant the config names (``slipstream.agents.control.loaded``: a loki stage's ladder too).

Owns ``fleet`` (the replicas serving now and each variant's accuracy and latency predictor), the
``loader`` thread (loads and warm-ups run beside serving, so no window waits on a load), the spare
replicas, and ``pace_ns`` (what a queued item takes at the predicted pace of a full batch). It is told
which config to prepare; which config is in force, and when a prepared fleet takes over, is the
config switch's (``slipstream.agents.stage.config_switch``).

Spare replicas: loaded, warmed replicas of the config in force that serve nothing, up to
``max_replicas`` in all. A scale-down parks the replicas it frees; after a config goes in force the
loader tops the spare replicas up in the background. A scale-up inside the worker then serves at once:
a load and warm-up during a burst took 0.4-0.6 s on a 2-core host and slowed the replicas already serving. A
spare replica costs one model's memory and no core (it runs nothing).
"""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from ...schemas.records import StageConfig
from ...streams import placement
from ...streams.batching import NS_PER_MS
from ...streams.latency import LatencyCurve, RecentLatency
from ...streams.profile_store import ProfileStore, lookup
from ...streams.spec import Pipeline
from ...streams.timeline import mark
from ..control import loaded, variants
from ..executors import check_digest, pinned
from ..metrics import StageMetrics
from ..replicas import ExecutorFactory, Fleet, Replica, VariantState, new_replica, warmup_curve
from . import log, log_failure


class ReplicaPool:
    def __init__(self, pipe: Pipeline, stage: str, factory: ExecutorFactory, metrics: StageMetrics,
                 max_replicas: int, profiles: ProfileStore | None = None,
                 warmup_batches: tuple[int, ...] = ()) -> None:
        self.pipe, self.stage, self.spec, self.factory, self.metrics = pipe, stage, pipe.stage(stage), factory, metrics
        self.max_replicas = max_replicas
        self.profiles = profiles  # the planner's profile store: predictors start from its numbers
        self.warmup_batches = warmup_batches
        self.fleet = Fleet()
        self.spares = SpareReplicas()
        self.pace_ns = 0  # predicted time a queued item takes, one replica serving full batches (0: unknown)
        self.loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"load-{stage}")
        self._spare_fill: asyncio.Future | None = None

    def replicas_for(self, cfg: StageConfig) -> int:
        return placement.layout(cfg.replicas, self.max_replicas).per_worker

    def idle(self) -> Replica | None:
        return self.fleet.idle()

    def serve_ns(self, cfg: StageConfig) -> int:
        """The fastest batch-1 latency predicted for a variant of ``cfg`` in service (0 when none is
        loaded), and the pace of a full batch (:meth:`behind`) updated on the way."""
        vs = [self.fleet.variants[v] for v in variants(cfg) if v in self.fleet.variants]
        if not vs:
            return 0
        b = cfg.max_batch
        self.pace_ns = max(v.predictor.predict_ns(b) for v in vs) // b
        return min(v.predictor.predict_ns(1) for v in vs)

    def behind(self, queued: int, cfg: StageConfig) -> bool:
        """``queued`` items are more than the replicas serve within the SLO (always room for a
        window each)."""
        replicas = max(len(self.fleet.replicas), 1)
        if queued < cfg.max_batch * replicas:
            return False
        return queued * self.pace_ns > self.pipe.slo_ms * NS_PER_MS * replicas

    async def _load_replica(self, cfg: StageConfig, fleet: Fleet) -> tuple[Replica, dict[str, LatencyCurve], int]:
        """One replica of ``cfg``'s variants beside ``fleet``, loaded and warmed on the loader thread:
        the replica, each variant's warm-up curve and the load's ns (the rest of the time is the warm-up)."""
        loop = asyncio.get_running_loop()
        variants = [self.spec.variant(n) for n in loaded(cfg)]
        index = max((r.index for r in [*fleet.replicas, *self.spares.replicas]), default=-1) + 1
        t0 = time.time_ns()
        replica = await loop.run_in_executor(self.loader, new_replica, pinned(self.factory, cfg.digests), variants,
                                             self.pipe.hardware[cfg.hardware], self.stage, index)
        load_ns = time.time_ns() - t0
        sizes = self.warmup_batches or (1, cfg.max_batch)
        curves = {v.name: await loop.run_in_executor(self.loader, warmup_curve, replica.executors[v.name], sizes)
                  for v in variants}
        return replica, curves, load_ns

    async def prepare(self, cfg: StageConfig, current: Fleet) -> Fleet:
        """The fleet for ``cfg``: ``current``'s replicas when they run the same variants on the same
        hardware (a pure replica change), then spare replicas, then new ones loaded and warmed off the
        event loop."""
        same = bool(current.replicas) and set(current.variants) == set(loaded(cfg)) and \
            cfg.hardware == current.hardware
        keep = current.replicas[:self.replicas_for(cfg)] if same else []
        reused = self.spares.take(current, self.replicas_for(cfg) - len(keep)) if same else []
        keep = keep + reused
        for name, ex in (kv for r in keep for kv in r.executors.items()):  # kept replicas too
            check_digest(ex, cfg.digests.get(name, ""), "the StageConfig")
        fleet = Fleet(list(keep), dict(current.variants) if same else {}, cfg.hardware)
        load_ns = warm_ns = 0
        while len(fleet.replicas) < self.replicas_for(cfg):
            t0 = time.time_ns()
            replica, curves, load = await self._load_replica(cfg, fleet)
            for v in map(self.spec.variant, loaded(cfg)):  # without a profile the first warm-up seeds the predictor
                if v.name not in fleet.variants:
                    profile = lookup(self.profiles, v, cfg.hardware) if self.profiles is not None else None
                    seed = profile.curve() if profile is not None else curves[v.name]
                    fleet.variants[v.name] = VariantState(v.accuracy, RecentLatency(seed, clock=time.monotonic_ns))
            fleet.replicas.append(replica)
            load_ns, warm_ns = load_ns + load, warm_ns + time.time_ns() - t0 - load
        if cfg.epoch >= 0:
            mark("config-loaded", epoch=cfg.epoch, replicas=len(fleet.replicas),
                 new=len(fleet.replicas) - len(keep), spares=len(reused), load_ms=f"{load_ns / 1e6:.1f}",
                 warm_ms=f"{warm_ns / 1e6:.1f}")
        return fleet

    def put_in_force(self, fleet: Fleet) -> None:
        """``fleet`` serves from now on; the replicas of the last one it does not run are parked or closed."""
        old, self.fleet = self.fleet, fleet
        self.retire_unused(old, fleet)
        self.metrics.observe_fleet(fleet)

    def keep_spares(self, cfg: StageConfig, waiting: Callable[[], bool]) -> None:
        """Top the spare replicas of ``cfg`` (in force) up to ``max_replicas`` in the background, one
        load at a time, while no new config is ``waiting``."""
        if self._spare_fill is None or self._spare_fill.done():
            self._spare_fill = asyncio.ensure_future(self._fill_spares(cfg, waiting))
            self._spare_fill.add_done_callback(log_failure)

    async def _fill_spares(self, cfg: StageConfig, waiting: Callable[[], bool]) -> None:
        while not waiting() and len(self.fleet.replicas) + len(self.spares.replicas) < self.max_replicas:
            fleet = self.fleet
            replica, _, _ = await self._load_replica(cfg, fleet)
            if self.fleet is not fleet or not self.spares.park(replica, fleet, fleet, self.max_replicas):
                replica.retire()  # the config changed meanwhile
                return
            mark("spare-loaded", epoch=cfg.epoch, spares=len(self.spares.replicas))

    def retire_unused(self, old: Fleet, *kept: Fleet) -> None:
        """Replicas of ``old`` that none of ``kept`` runs: spare replicas when ``kept[0]`` (the fleet that
        follows) runs the same variants on the same hardware, else closed."""
        keep = {id(r) for f in kept for r in f.replicas}
        for replica in old.replicas:
            if id(replica) not in keep and not self.spares.park(replica, old, kept[0], self.max_replicas):
                replica.retire()

    def drop_hung(self, replica: Replica, why: str) -> None:
        """A run past its deadline: the replica takes no more work (its thread cannot be stopped; the
        heartbeat keeps failing until a restart frees it)."""
        log.error("%s; loading a new replica", why)
        replica.hung = why
        replica.retire()  # closed when its window ends
        if replica in self.fleet.replicas:
            self.fleet.replicas.remove(replica)
        self.metrics.observe_fleet(self.fleet)

    def close(self, *others: Fleet) -> None:
        """Stop loading; close every replica (the fleet's, ``others``', the spare replicas)."""
        if self._spare_fill is not None:
            self._spare_fill.cancel()
        self.loader.shutdown(wait=True)
        for replica in {id(r): r for f in (self.fleet, *others) for r in f.replicas}.values():
            replica.retire()
        self.spares.clear()


class SpareReplicas:
    """Loaded replicas no fleet runs, for one (variants, hardware): the next fleet of the same takes
    them before it loads anything. A spare replica takes no work (only a fleet's replicas are given
    windows); one busy when parked finishes its window."""

    def __init__(self) -> None:
        self.replicas: list[Replica] = []
        self.kind: tuple | None = None

    @staticmethod
    def _kind(fleet: Fleet) -> tuple:
        return fleet.hardware, frozenset(fleet.variants)

    def park(self, replica: Replica, old: Fleet, after: Fleet, limit: int) -> bool:
        """Keep ``replica`` of ``old`` as a spare replica when ``after`` runs the same kind and fewer than
        ``limit`` replicas (``after``'s and the spare ones) are loaded; False: close it."""
        if self._kind(after) != self.kind:
            self.clear()
            self.kind = self._kind(after)
        if replica.hung or replica.retired or self._kind(old) != self.kind or \
                len(self.replicas) + len(after.replicas) >= limit:
            return False
        self.replicas.append(replica)
        return True

    def take(self, fleet: Fleet, n: int) -> list[Replica]:
        """Up to ``n`` spare replicas for a fleet of ``fleet``'s kind, lowest index first."""
        if n <= 0 or self._kind(fleet) != self.kind:
            return []
        self.replicas.sort(key=lambda r: r.index)
        out, self.replicas = self.replicas[:n], self.replicas[n:]
        return out

    def clear(self) -> None:
        for replica in self.replicas:
            replica.retire()
        self.replicas = []
