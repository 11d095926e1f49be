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

from typing import Mapping

from ..schemas.records import StageConfig
from ..streams import shares
from ..streams.control_rules import InvalidControl, check
from ..streams.spec import Pipeline


def defaults(pipe: Pipeline, stage: str) -> StageConfig:
    """The config in force before any control record: the spec's defaults (epoch -1)."""
    return pipe.stage(stage).defaults


def variants(cfg: StageConfig) -> tuple[str, ...]:
    """Every variant ``cfg`` routes to (a share above 0)."""
    return tuple(sorted(shares.in_service(cfg.routing, cfg.variant)))


def loaded(cfg: StageConfig) -> tuple[str, ...]:
    """Every variant ``cfg`` names: the executors to keep loaded (``slipstream.streams.shares.named``)."""
    return shares.named(cfg.routing, cfg.variant)


def accept(pipe: Pipeline, stage: str, rec: StageConfig, current: StageConfig
           ) -> tuple[StageConfig | None, str]:
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
    return rec, ""


def choose_variant(request_id: str, accuracy_floor: float | None, cfg: StageConfig,
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
