"""Config switch: StageConfigs from the control topic, accepted (their replicas prepared by the pool
first) and put in force only at a window boundary (the batch loop calls :meth:`ConfigSwitch.at_boundary`).

At start (:meth:`ConfigSwitch.start`) the worker takes the newest config of its stage the control topic
held (``slipstream.agents.app.ControlFeed`` reads it to its end first) and loads only that one: compaction keeps
the latest record per stage only eventually, and a worker that put the older ones in force in turn
would load model after model while it already counts as ready.

Owns ``config`` (the StageConfig in force) and ``pending`` (an accepted one with its prepared fleet,
waiting for the boundary). Asks the replica pool (``slipstream.agents.stage.pool``) to prepare fleets and puts
them in force; a hung replica's replacement reaches service the same way.
"""
from __future__ import annotations

import asyncio
from typing import Callable, Sequence

from ...schemas.records import StageConfig
from ...streams.spec import Pipeline
from ...streams.timeline import mark
from ..control import accept, defaults, loaded
from ..metrics import StageMetrics
from ..replicas import Fleet, Replica
from . import log, log_failure
from .pool import ReplicaPool


class ConfigSwitch:
    def __init__(self, pipe: Pipeline, stage: str, pool: ReplicaPool, metrics: StageMetrics,
                 wake: Callable[[], None]) -> None:
        self.pipe, self.stage, self.pool, self.metrics = pipe, stage, pool, metrics
        self.wake = wake  # the batch loop: a config waits for the boundary
        self.config: StageConfig = defaults(pipe, stage)
        self.pending: tuple[StageConfig, Fleet] | None = None

    async def start(self, held: Sequence[StageConfig]) -> None:
        """Put in force the config to start with: of ``held`` (this stage's StageConfigs on the
        control topic when the worker started, in order), the newest the worker accepts and can
        load; the spec's defaults when there is none."""
        self.config, fleet = await self._initial(held)
        self.pool.put_in_force(fleet)
        self.metrics.lab(self.metrics.config_epoch).set(self.config.epoch)
        mark("model-loaded", replicas=len(fleet.replicas))
        self.pool.keep_spares(self.config, self._waiting)

    async def _initial(self, held: Sequence[StageConfig]) -> tuple[StageConfig, Fleet]:
        chain, cfg = [], self.config
        for rec in held:
            if (new := self._accepted(rec, cfg)) is not None:
                chain.append(cfg := new)
        for cfg in reversed(chain):
            try:
                fleet = await self.pool.prepare(cfg, Fleet())
            except Exception as exc:
                self._unloadable(cfg, exc)
                continue
            log.info("config epoch %d in force at start (the newest of %d on the control topic): %s",
                     cfg.epoch, len(held), cfg)
            return cfg, fleet
        return self.config, await self.pool.prepare(self.config, Fleet())

    def _waiting(self) -> bool:
        return self.pending is not None

    async def offer(self, rec: StageConfig) -> bool:
        """A StageConfig from the control topic: accept (and prepare its replicas) or reject."""
        current_cfg, current = self.pending if self.pending else (self.config, self.pool.fleet)
        cfg = self._accepted(rec, current_cfg)
        if cfg is None:
            return False
        try:
            fleet = await self.pool.prepare(cfg, current)  # load before switching: no request waits on a load
        except Exception as exc:  # a model that cannot load is a bad config, not a dead worker
            self._unloadable(cfg, exc)
            return False
        if self.pending is not None:  # superseded before it took effect: close what only it held
            self.pool.retire_unused(self.pending[1], fleet, self.pool.fleet)
        self.pending = (cfg, fleet)
        self.wake()
        return True

    def _accepted(self, rec: StageConfig, current: StageConfig) -> StageConfig | None:
        """``rec`` as the config to follow ``current``, or None (logged and counted when it was
        meant for this stage)."""
        cfg, why = accept(self.pipe, self.stage, rec, current)
        if cfg is None and rec.pipeline == self.pipe.name and rec.stage == self.stage:
            log.warning("control record rejected: %s", why)
            self.metrics.lab(self.metrics.config_rejected).inc()
        return cfg

    def _unloadable(self, cfg: StageConfig, exc: Exception) -> None:
        """A model that cannot load is a bad config, not a dead worker."""
        log.error("control record epoch %d rejected: cannot load %s: %s", cfg.epoch, loaded(cfg), exc)
        self.metrics.lab(self.metrics.config_rejected).inc()

    def at_boundary(self) -> StageConfig:
        """A window boundary: the pending config, if any, goes in force; the config in force."""
        if self.pending is None:
            return self.config
        (cfg, fleet), self.pending = self.pending, None
        self.config = cfg
        self.pool.put_in_force(fleet)
        self.metrics.lab(self.metrics.config_epoch).set(cfg.epoch)
        log.info("config epoch %d in force: %s; %d replica(s)", cfg.epoch, cfg, len(fleet.replicas))
        self.pool.keep_spares(cfg, self._waiting)
        mark("config-in-force", epoch=cfg.epoch, replicas=len(fleet.replicas))
        return cfg

    def replace_hung(self, replica: Replica, why: str) -> None:
        """A run past its deadline: the replica leaves the fleet and a new one is loaded in its place,
        in force at a window boundary (not a window: draining does not wait for it)."""
        self.pool.drop_hung(replica, why)
        task = asyncio.ensure_future(self._replace(self.config))
        task.add_done_callback(log_failure)

    async def _replace(self, cfg: StageConfig) -> None:
        fleet = await self.pool.prepare(cfg, self.pool.fleet)
        if self.config is cfg and self.pending is None:
            self.pending = (cfg, fleet)
            self.wake()
        else:  # a new config came meanwhile, with replicas of its own
            self.pool.retire_unused(fleet, self.pool.fleet, *([self.pending[1]] if self.pending else []))
