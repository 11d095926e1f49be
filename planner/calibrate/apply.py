"""A calibration applied: the document turned into the estimator's parameters (host, network,
service spread: ``slipstream.planner.sim.params``) and a problem's latency curves rescaled from one calibration
to another (or back to the profiles).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ...streams.latency import LatencyCurve
from ..sim.params import HostModel, Network, ServiceTime, Transit
from .fit import SLOWDOWN_WINDOW_S

MIN_CV = 0.05  # below this the spread is noise: deterministic service


def host_model(doc: Mapping[str, Any] | None) -> HostModel | None:
    """The cores the calibrated run's batches shared (None: sharing explained nothing)."""
    h = doc.get("host") if doc else None
    return HostModel(h["cores"], h["cores"] - h["free_cores"]) if h else None


def network(doc: Mapping[str, Any] | None) -> Network | None:
    """The estimator's Kafka transits from a calibration (a kind not measured, e.g. no join in the
    pipeline, takes ``between``'s; the results hop takes none, see the module docstring)."""
    if not doc or not doc.get("transit_ms"):
        return None
    q = doc["transit_ms"]
    base = q.get("between") or q.get("ingress") or next(iter(q.values()))
    ingress, between, to_join = (quantiles(doc, q.get(kind, base)) for kind in ("ingress", "between", "to_join"))
    return Network(ingress, between, to_join, Transit.constant(0.0))


def quantiles(doc: Mapping[str, Any], values: Sequence[float]) -> Transit:
    """A calibration's stored quantiles as a distribution (older calibrations stored every half percent
    without saying so)."""
    return Transit.quantiles(values, doc.get("quantile_pct"))


def service_time(doc: Mapping[str, Any] | None) -> ServiceTime:
    """The service spread of a calibration: within a second (lognormal ``service_cv``, by batch
    duration where it was measured: ``service_cv_by_ms``), from second to second (``slowdown``), and
    the worker's own time per batch (``dispatch_ms``); older calibrations lack the last two."""
    cv = float(doc.get("service_cv", 0.0)) if doc else 0.0
    slow = (doc or {}).get("slowdown") or {}
    pace = tuple(slow.get("factors", ()))
    pace = pace if len(pace) > 1 and np.std(pace) >= MIN_CV else ()
    kind, cv = ("lognormal", cv) if cv >= MIN_CV else ("deterministic", 0.0)
    dispatch = (doc or {}).get("dispatch_ms")
    by_ms = tuple((float(ms), max(float(c), MIN_CV)) for ms, c in (doc or {}).get("service_cv_by_ms") or ())
    own = tuple((k, tuple((float(ms), max(float(c), MIN_CV)) for ms, c in v["cv_by_ms"]))
                for k, v in sorted(((doc or {}).get("service") or {}).items()) if v.get("cv_by_ms"))
    lognormal = kind == "lognormal"
    return ServiceTime(kind, cv, pace, float(slow.get("window_s", SLOWDOWN_WINDOW_S)),
                       quantiles(doc, dispatch) if dispatch else Transit(), by_ms if lognormal else (),
                       own if lognormal else ())


def _scaled(curve: LatencyCurve, factor) -> LatencyCurve:
    """``curve`` with each point times ``factor(batch size)``."""
    f = {b: factor(b) for b in curve.points_ms}
    return curve if all(x == 1.0 for x in f.values()) else LatencyCurve.fit({b: v * f[b] for b, v in curve.points_ms.items()})


def recalibrated(problem, new: Mapping[str, Any], old: Mapping[str, Any] | None):
    """``problem``, whose curves are scaled by calibration ``old`` (None: as profiled), planned with
    ``new`` instead: its service scales, network, service spread and host."""
    from dataclasses import replace

    from ...streams.calibration import service_scale

    stages = tuple(replace(st, variants=tuple(
        replace(v, latency={hw: _scaled(c, lambda b, v=v, hw=hw: service_scale(new, v.name, hw, b)
                                        / service_scale(old, v.name, hw, b))
                            for hw, c in v.latency.items()}) for v in st.variants)) for st in problem.stages)
    return replace(problem, stages=stages, network=network(new) or problem.network, service=service_time(new),
                   host=host_model(new))


def profiled_curves(problem, calibration: Mapping[str, Any] | None) -> dict[tuple[str, str], LatencyCurve]:
    """(variant, hardware) -> the curve as profiled, from a problem scaled by ``calibration``."""
    from ...streams.calibration import service_scale

    return {(v.name, hw): _scaled(c, lambda b, v=v, hw=hw: 1.0 / service_scale(calibration, v.name, hw, b))
            for st in problem.stages for v in st.variants for hw, c in v.latency.items()}
