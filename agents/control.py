"""Stage configuration from the control topic: what a worker accepts, and which variant a request gets.

A ``StageConfig`` is accepted only if it is for this pipeline and stage, passes the control topic's
rules (``slipstream.streams.control_rules``: variants and hardware the pipeline spec knows, bounded numbers) and
has a higher epoch (a later offset on the control topic) than the config in force.
Anything else is rejected with a reason (logged and counted by the worker) and the last good config
stays; so is a config whose ``digests`` pin a model other than the one a variant loads (checked by the
worker as it loads, ``slipstream.agents.executors.pinned``). Pure functions: the worker applies an accepted config
at the next batch boundary.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..schemas.records import StageConfig
from ..streams import shares
from ..streams.control_rules import InvalidControl, check
from ..streams.spec import Pipeline


@dataclass(frozen=True)
class ActiveConfig:
    variant: str
    hardware: str
    max_batch: int
    batch_timeout_ms: float
    epoch: int = -1  # -1: the spec's defaults, before any control record
    routing: Mapping[str, float] = field(default_factory=dict)  # variant -> share (Loki)
    replicas: int = 1
    digests: Mapping[str, str] = field(default_factory=dict)  # variant -> pinned model digest

    @property
    def variants(self) -> tuple[str, ...]:
        """Every variant this config routes to (a share above 0)."""
        return tuple(sorted(shares.in_service(self.routing, self.variant)))

    @property
    def loaded(self) -> tuple[str, ...]:
        """Every variant this config names (the executors to keep loaded): those it routes to and
        those ``routing`` names with share 0 (a loki stage's ladder: loaded, serving nothing, so a
        later config that only moves shares loads no model); ``variant`` alone when it is empty."""
        return tuple(sorted(self.routing or {self.variant: 1.0}))


def defaults(pipe: Pipeline, stage: str) -> ActiveConfig:
    d = pipe.stage(stage).defaults
    return ActiveConfig(d.variant, d.hardware, d.max_batch, d.batch_timeout_ms, -1, {}, d.replicas)


def accept(pipe: Pipeline, stage: str, rec: StageConfig, current: ActiveConfig
           ) -> tuple[ActiveConfig | None, str]:
    """(new config, "") when ``rec`` should replace ``current``; (None, reason) otherwise. The fields
    are checked by the control topic's one rule set (``slipstream.streams.control_rules``)."""
    if rec.pipeline != pipe.name or rec.stage != stage:
        return None, f"for {rec.pipeline}/{rec.stage}, not {pipe.name}/{stage}"
    try:
        check("StageConfig", stage, rec.to_dict(), pipe.name, pipe)
    except InvalidControl as exc:
        return None, str(exc)
    if rec.epoch <= current.epoch:
        return None, f"stale epoch {rec.epoch} <= {current.epoch} in force"
    routing = {k: float(v) for k, v in rec.routing.items()}
    return ActiveConfig(rec.variant, rec.hardware, int(rec.max_batch), float(rec.batch_timeout_ms),
                        int(rec.epoch), routing, int(rec.replicas), dict(rec.digests)), ""


def choose_variant(request_id: str, accuracy_floor: float | None, cfg: ActiveConfig,
                   accuracy: Mapping[str, float]) -> tuple[str | None, str]:
    """The variant a request runs on: ``slipstream.streams.shares.choose`` over the config's routing (the rule the
    estimator runs too), restricted to variants meeting the request's accuracy floor (INFaaS).
    (None, reason) when no loaded variant meets the floor."""
    in_use = shares.in_service(cfg.routing, cfg.variant)
    if accuracy_floor is not None:
        ok = {v: w for v, w in in_use.items() if accuracy[v] >= accuracy_floor}
        if not ok:
            best = max(in_use, key=lambda v: accuracy[v])
            return None, (f"accuracy floor {accuracy_floor:.3f} above every variant in service "
                          f"(best {best}: {accuracy[best]:.3f})")
        in_use = ok
    return shares.choose(request_id, in_use), ""
