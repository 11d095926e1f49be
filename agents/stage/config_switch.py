"""Config switch: StageConfigs from the control topic, accepted (their instances loaded first) and put
in force only at a window boundary (the batch loop calls :meth:`ConfigSwitch._apply_pending_config`).

At start (:meth:`ConfigSwitch._initial_config`) the worker takes the newest config of its stage the
control topic held (``slipstream.agents.app.ControlFeed`` reads it to its end first) and loads only that one:
compaction keeps the latest record per stage only eventually, and a worker that walked the older ones
loaded model after model while it already counted as ready.

Owns ``config`` (the StageConfig in force) and ``_pending`` (an accepted one with its prepared fleet,
waiting for the boundary). Reads and replaces ``fleet`` through the ``fleet`` part.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from slipstream.agents.control import ActiveConfig, accept
from slipstream.agents.instances import Fleet
from slipstream.agents.stage import log
from slipstream.streams.timeline import mark


class ConfigSwitch:
    config: ActiveConfig
    _pending: tuple[ActiveConfig, Fleet] | None

    async def offer_config(self, rec: dict) -> bool:
        """A StageConfig from the control topic: accept (and prepare its instances) or reject."""
        current_cfg, current = self._pending if self._pending else (self.config, self.fleet)
        cfg = self._accepted(rec, current_cfg)
        if cfg is None:
            return False
        try:
            fleet = await self._prepare(cfg, current)  # load before switching: no request waits on a load
        except Exception as exc:  # a model that cannot load is a bad config, not a dead worker
            self._unloadable(cfg, exc)
            return False
        if self._pending is not None:  # superseded before it took effect: close what only it held
            self._retire_unused(self._pending[1], fleet, self.fleet)
        self._pending = (cfg, fleet)
        self._wake.set()
        return True

    async def _initial_config(self, held: Sequence[Mapping]) -> tuple[ActiveConfig, Fleet]:
        """The config to start with and its fleet: of ``held`` (this stage's StageConfigs on the
        control topic when the worker started, in order), the newest the worker accepts and can
        load; the spec's defaults when there is none."""
        chain, cfg = [], self.config
        for rec in held:
            if (new := self._accepted(rec, cfg)) is not None:
                chain.append(cfg := new)
        for cfg in reversed(chain):
            try:
                fleet = await self._prepare(cfg, Fleet())
            except Exception as exc:
                self._unloadable(cfg, exc)
                continue
            log.info("config epoch %d in force at start (the newest of %d on the control topic): %s",
                     cfg.epoch, len(held), cfg)
            return cfg, fleet
        return self.config, await self._prepare(self.config, Fleet())

    def _accepted(self, rec: Mapping, current: ActiveConfig) -> ActiveConfig | None:
        """``rec`` as the config to follow ``current``, or None (logged and counted when it was
        meant for this stage)."""
        cfg, why = accept(self.pipe, self.stage, rec, current)
        if cfg is None and rec.get("pipeline") == self.pipe.name and rec.get("stage") == self.stage:
            log.warning("control record rejected: %s", why)
            self.metrics.lab(self.metrics.config_rejected).inc()
        return cfg

    def _unloadable(self, cfg: ActiveConfig, exc: Exception) -> None:
        """A model that cannot load is a bad config, not a dead worker."""
        log.error("control record epoch %d rejected: cannot load %s: %s", cfg.epoch, cfg.loaded, exc)
        self.metrics.lab(self.metrics.config_rejected).inc()

    def _apply_pending_config(self) -> None:
        if self._pending is None:
            return
        (cfg, fleet), old = self._pending, self.fleet
        self._pending = None
        self.config, self.fleet = cfg, fleet
        self._retire_unused(old, fleet)
        self._set_instance_gauge()
        self.metrics.lab(self.metrics.config_epoch).set(cfg.epoch)
        log.info("config epoch %d in force: %s; %d instance(s)", cfg.epoch, cfg, len(fleet.instances))
        self._keep_spares()
        mark("config-in-force", epoch=cfg.epoch, instances=len(fleet.instances))
