"""Fleet: the model instances a config needs (``agents.instances``, ``streams.placement``).

Owns ``fleet`` (the instances serving now and each variant's accuracy and latency predictor), the
``loader`` thread (loads and warm-ups run beside serving, so no window waits on a load) and the
replacement of an instance whose run passed its deadline. A new fleet reaches service through
``config_switch`` (``_pending``), at a window boundary.
"""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from agents.control import ActiveConfig
from agents.executors import check_digest, pinned
from agents.instances import Fleet, Instance, VariantState, new_instance, warmup_curve
from agents.stage import log
from streams import placement
from streams.latency import RecentLatency
from streams.profile_store import lookup
from streams.timeline import mark


class FleetKeeper:
    fleet: Fleet
    loader: ThreadPoolExecutor
    max_instances: int

    def instances_for(self, cfg: ActiveConfig) -> int:
        return placement.layout(cfg.replicas, self.max_instances).instances

    async def _prepare(self, cfg: ActiveConfig, current: Fleet) -> Fleet:
        """The fleet for ``cfg``: ``current``'s instances when they run the same variants on the same
        hardware (a pure replica change), plus new ones loaded and warmed off the event loop."""
        loop = asyncio.get_running_loop()
        hw = self.pipe.hardware[cfg.hardware]
        variants = [self.spec.variant(n) for n in cfg.variants]
        same = bool(current.instances) and set(current.variants) == set(cfg.variants) and \
            cfg.hardware == current.hardware
        keep = current.instances[:self.instances_for(cfg)] if same else []
        for name, ex in (kv for inst in keep for kv in inst.executors.items()):  # kept copies too
            check_digest(ex, cfg.digests.get(name, ""), "the StageConfig")
        factory = pinned(self.factory, cfg.digests)
        fleet = Fleet(list(keep), dict(current.variants) if same else {}, cfg.hardware)
        load_ns = warm_ns = 0
        while len(fleet.instances) < self.instances_for(cfg):
            t0 = time.time_ns()
            inst = await loop.run_in_executor(self.loader, new_instance, factory, variants, hw,
                                              self.stage, len(fleet.instances))
            t1 = time.time_ns()
            sizes = self.warmup_batches or (1, cfg.max_batch)
            for v in variants:  # warm every copy; without a profile the first warm-up seeds the predictor
                curve = await loop.run_in_executor(self.loader, warmup_curve, inst.executors[v.name], sizes)
                if v.name not in fleet.variants:
                    profile = lookup(self.profiles, v, cfg.hardware) if self.profiles is not None else None
                    seed = profile.curve() if profile is not None else curve
                    fleet.variants[v.name] = VariantState(v.accuracy, RecentLatency(seed))
            fleet.instances.append(inst)
            load_ns, warm_ns = load_ns + t1 - t0, warm_ns + time.time_ns() - t1
        if cfg.epoch >= 0:
            mark("config-loaded", epoch=cfg.epoch, instances=len(fleet.instances),
                 new=len(fleet.instances) - len(keep), load_ms=f"{load_ns / 1e6:.1f}",
                 warm_ms=f"{warm_ns / 1e6:.1f}")
        return fleet

    @staticmethod
    def _retire_unused(old: Fleet, *kept: Fleet) -> None:
        keep = {id(i) for f in kept for i in f.instances}
        for inst in old.instances:
            if id(inst) not in keep:
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
