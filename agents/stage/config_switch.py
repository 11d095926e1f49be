"""Config switch: StageConfigs from the control topic, accepted (their instances loaded first) and put
in force only at a window boundary (the batch loop calls :meth:`ConfigSwitch._apply_pending_config`).

Owns ``config`` (the StageConfig in force) and ``_pending`` (an accepted one with its prepared fleet,
waiting for the boundary). Reads and replaces ``fleet`` through the ``fleet`` part.
"""
from __future__ import annotations

from agents.control import ActiveConfig, accept
from agents.instances import Fleet
from agents.stage import log
from streams.timeline import mark


class ConfigSwitch:
    config: ActiveConfig
    _pending: tuple[ActiveConfig, Fleet] | None

    async def offer_config(self, rec: dict) -> bool:
        """A StageConfig from the control topic: accept (and prepare its instances) or reject."""
        current_cfg, current = self._pending if self._pending else (self.config, self.fleet)
        cfg, why = accept(self.pipe, self.stage, rec, current_cfg)
        if cfg is None:
            if rec.get("pipeline") == self.pipe.name and rec.get("stage") == self.stage:
                log.warning("control record rejected: %s", why)
                self.metrics.lab(self.metrics.config_rejected).inc()
            return False
        try:
            fleet = await self._prepare(cfg, current)  # load before switching: no request waits on a load
        except Exception as exc:  # a model that cannot load is a bad config, not a dead worker
            log.error("control record epoch %d rejected: cannot load %s: %s", cfg.epoch, cfg.variants, exc)
            self.metrics.lab(self.metrics.config_rejected).inc()
            return False
        if self._pending is not None:  # superseded before it took effect: close what only it held
            self._retire_unused(self._pending[1], fleet, self.fleet)
        self._pending = (cfg, fleet)
        self._wake.set()
        return True

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
        mark("config-in-force", epoch=cfg.epoch, instances=len(fleet.instances))
