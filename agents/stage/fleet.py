"""Fleet: the model instances a config needs (``slipstream.agents.instances``, ``slipstream.streams.placement``), each with an
executor per variant the config names (``ActiveConfig.loaded``: a loki stage's ladder too).

Owns ``fleet`` (the instances serving now and each variant's accuracy and latency predictor), the
``loader`` thread (loads and warm-ups run beside serving, so no window waits on a load), ``spares``
and the replacement of an instance whose run passed its deadline.

Spares: loaded, warmed copies of the config in force that serve nothing, up to ``max_instances`` in
all. A scale-down parks the copies it frees; after a config goes in force the loader tops the spares
up in the background. A scale-up inside the worker then serves at once: a load and warm-up during a
burst took 0.4-0.6 s on a 2-core host and slowed the copies already serving. A spare costs one model
copy of memory and no core (it runs nothing). A new fleet reaches service through
``config_switch`` (``_pending``), at a window boundary.
"""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from slipstream.agents.control import ActiveConfig
from slipstream.agents.executors import check_digest, pinned
from slipstream.agents.instances import Fleet, Instance, VariantState, new_instance, warmup_curve
from slipstream.agents.stage import log
from slipstream.streams import placement
from slipstream.streams.latency import LatencyCurve, RecentLatency
from slipstream.streams.profile_store import lookup
from slipstream.streams.timeline import mark


class FleetKeeper:
    fleet: Fleet
    loader: ThreadPoolExecutor
    max_instances: int
    spares: Spares
    _spare_fill: asyncio.Future | None

    def instances_for(self, cfg: ActiveConfig) -> int:
        return placement.layout(cfg.replicas, self.max_instances).instances

    async def _load_copy(self, cfg: ActiveConfig, fleet: Fleet) -> tuple[Instance, dict[str, LatencyCurve], int]:
        """One copy of ``cfg``'s variants beside ``fleet``, loaded and warmed on the loader thread: the
        copy, each variant's warm-up curve and the load's ns (the rest of the time is the warm-up)."""
        loop = asyncio.get_running_loop()
        variants = [self.spec.variant(n) for n in cfg.loaded]
        index = max((i.index for i in [*fleet.instances, *self.spares.copies]), default=-1) + 1
        t0 = time.time_ns()
        inst = await loop.run_in_executor(self.loader, new_instance, pinned(self.factory, cfg.digests), variants,
                                          self.pipe.hardware[cfg.hardware], self.stage, index)
        load_ns = time.time_ns() - t0
        sizes = self.warmup_batches or (1, cfg.max_batch)
        curves = {v.name: await loop.run_in_executor(self.loader, warmup_curve, inst.executors[v.name], sizes)
                  for v in variants}
        return inst, curves, load_ns

    async def _prepare(self, cfg: ActiveConfig, current: Fleet) -> Fleet:
        """The fleet for ``cfg``: ``current``'s instances when they run the same variants on the same
        hardware (a pure replica change), then spares, then new copies loaded and warmed off the
        event loop."""
        same = bool(current.instances) and set(current.variants) == set(cfg.loaded) and \
            cfg.hardware == current.hardware
        keep = current.instances[:self.instances_for(cfg)] if same else []
        reused = self.spares.take(current, self.instances_for(cfg) - len(keep)) if same else []
        keep = keep + reused
        for name, ex in (kv for inst in keep for kv in inst.executors.items()):  # kept copies too
            check_digest(ex, cfg.digests.get(name, ""), "the StageConfig")
        fleet = Fleet(list(keep), dict(current.variants) if same else {}, cfg.hardware)
        load_ns = warm_ns = 0
        while len(fleet.instances) < self.instances_for(cfg):
            t0 = time.time_ns()
            inst, curves, load = await self._load_copy(cfg, fleet)
            for v in map(self.spec.variant, cfg.loaded):  # without a profile the first warm-up seeds the predictor
                if v.name not in fleet.variants:
                    profile = lookup(self.profiles, v, cfg.hardware) if self.profiles is not None else None
                    seed = profile.curve() if profile is not None else curves[v.name]
                    fleet.variants[v.name] = VariantState(v.accuracy, RecentLatency(seed, clock=time.monotonic_ns))
            fleet.instances.append(inst)
            load_ns, warm_ns = load_ns + load, warm_ns + time.time_ns() - t0 - load
        if cfg.epoch >= 0:
            mark("config-loaded", epoch=cfg.epoch, instances=len(fleet.instances),
                 new=len(fleet.instances) - len(keep), spares=len(reused), load_ms=f"{load_ns / 1e6:.1f}",
                 warm_ms=f"{warm_ns / 1e6:.1f}")
        return fleet

    def _keep_spares(self) -> None:
        """Top the spares up to ``max_instances`` in the background (one load at a time)."""
        if self._spare_fill is None or self._spare_fill.done():
            self._spare_fill = asyncio.ensure_future(self._fill_spares())
            self._spare_fill.add_done_callback(self._window_done)

    async def _fill_spares(self) -> None:
        while self._pending is None and len(self.fleet.instances) + len(self.spares.copies) < self.max_instances:
            fleet, cfg = self.fleet, self.config
            inst, _, _ = await self._load_copy(cfg, fleet)
            if self.fleet is not fleet or not self.spares.park(inst, fleet, fleet, self.max_instances):
                inst.retire()  # the config changed meanwhile
                return
            mark("spare-loaded", epoch=cfg.epoch, spares=len(self.spares.copies))

    def _retire_unused(self, old: Fleet, *kept: Fleet) -> None:
        """Instances of ``old`` that none of ``kept`` runs: spares when ``kept[0]`` (the fleet that
        follows) runs the same variants on the same hardware, else closed."""
        keep = {id(i) for f in kept for i in f.instances}
        for inst in old.instances:
            if id(inst) not in keep and not self.spares.park(inst, old, kept[0], self.max_instances):
                inst.retire()

    def _set_instance_gauge(self) -> None:
        self.metrics.observe_fleet(self.fleet)

    def _hung(self, inst: Instance, why: str) -> None:
        """A run past its deadline: the instance takes no more work (its thread cannot be stopped;
        the heartbeat keeps failing until a restart frees it) and a new one is loaded in its place."""
        log.error("%s; loading a new instance", why)
        inst.hung = why
        inst.retire()  # closed when its window ends
        if inst in self.fleet.instances:
            self.fleet.instances.remove(inst)
        self._set_instance_gauge()
        task = asyncio.ensure_future(self._replace_instances(self.config))  # not a window: drain skips it
        task.add_done_callback(self._window_done)

    async def _replace_instances(self, cfg: ActiveConfig) -> None:
        fleet = await self._prepare(cfg, self.fleet)
        if self.config is cfg and self._pending is None:
            self._pending = (cfg, fleet)
            self._wake.set()
        else:  # a new config came meanwhile, with instances of its own
            self._retire_unused(fleet, self.fleet, *([self._pending[1]] if self._pending else []))


class Spares:
    """Loaded copies no fleet runs, for one (variants, hardware): the next fleet of the same takes them
    before it loads anything. A copy takes no work while it is a spare (only a fleet's instances are
    given windows); a copy busy when parked finishes its window."""

    def __init__(self) -> None:
        self.copies: list[Instance] = []
        self.kind: tuple | None = None

    @staticmethod
    def _kind(fleet: Fleet) -> tuple:
        return fleet.hardware, frozenset(fleet.variants)

    def park(self, inst: Instance, old: Fleet, after: Fleet, limit: int) -> bool:
        """Keep ``inst`` of ``old`` as a spare when ``after`` runs the same kind and fewer than ``limit``
        copies (``after``'s and the spares) are loaded; False: close it."""
        if self._kind(after) != self.kind:
            self.clear()
            self.kind = self._kind(after)
        if inst.hung or inst.retired or self._kind(old) != self.kind or \
                len(self.copies) + len(after.instances) >= limit:
            return False
        self.copies.append(inst)
        return True

    def take(self, fleet: Fleet, n: int) -> list[Instance]:
        """Up to ``n`` spares for a fleet of ``fleet``'s kind, lowest index first."""
        if n <= 0 or self._kind(fleet) != self.kind:
            return []
        self.copies.sort(key=lambda i: i.index)
        out, self.copies = self.copies[:n], self.copies[n:]
        return out

    def clear(self) -> None:
        for inst in self.copies:
            inst.retire()
        self.copies = []
