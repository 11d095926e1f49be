"""Calibration: fit what the profiles do not say from a live run's hop timings, and hand it to the
estimator (stored by ``streams.calibration``, read back here as simulator parameters).

From every hop of every result (``HopTiming``: enqueued, received, started, finished):

- **transit** per kind of hop, ``received - enqueued``: produce, broker, and the consumer's fetch
  wait, as quantiles (an empirical distribution). ``ingress`` is the client's hop into the first
  stage, ``between`` a stage's hop into the next, ``to_join`` a fragment's hop into the join. The hop
  to the results topic is not in a result (its ``finished_ns`` is stamped before), and the measured
  latency leaves it out too, so the estimator does the same;
- **service** per (variant, hardware), ``(finished - started) / l(b)`` against the *uncalibrated*
  profile curve at the hop's batch size: the mean ratio is the ``scale`` the profile store then
  applies (the planner plans, and the workers predict, with the scaled curve); its spread around the
  scale is the estimator's lognormal ``service_cv``. The scale takes in whatever made batches slower
  than profiled in that run: cores shared with other replicas, the broker and the load generator.

Queue and batch formation (``started - received``) are what the estimator computes, not inputs.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Mapping

import numpy as np

from planner.sim.params import Network, ServiceTime, Transit
from streams.calibration import key
from streams.latency import LatencyCurve
from streams.profile_store import machine_info, now_iso

QUANTILES = np.linspace(0.0, 100.0, 201)  # every half percent, both ends included
HOP_KINDS = ("ingress", "between", "to_join")
MIN_CV = 0.05  # below this the spread is noise: deterministic service


class CalibrationFitError(ValueError):
    """Results that cannot be fitted; the message says what is missing."""


def hop_kind(hop: Mapping[str, Any], created_ns: int) -> str:
    if hop["stage"] == "join":
        return "to_join"
    return "ingress" if hop["enqueued_ns"] == created_ns else "between"


def components(results: Iterable[Mapping[str, Any]]):
    """Each recorded hop as (kind, stage, variant, batch, transit ns, wait ns, service ns); hops from
    before ``received_ns`` was recorded are skipped."""
    for r in results:
        for h in r.get("hops", ()):
            if not h.get("received_ns"):
                continue
            yield (hop_kind(h, r["created_ns"]), h["stage"], h["variant"], h["batch_size"],
                   h["received_ns"] - h["enqueued_ns"], h["started_ns"] - h["received_ns"],
                   h["finished_ns"] - h["started_ns"])


def fit(results: Iterable[Mapping[str, Any]], curves: Mapping[tuple[str, str], LatencyCurve],
        hardware_of: Mapping[tuple[str, str], str], source: str = "") -> dict:
    """The calibration document of a run. ``curves``: (variant, hardware) -> uncalibrated curve;
    ``hardware_of``: (stage, variant) -> the hardware that ran it."""
    results = list(results)
    transit: dict[str, list[float]] = defaultdict(list)
    ratios: dict[str, list[float]] = defaultdict(list)
    hops = 0
    for kind, stage, variant, batch, t_ns, _w, s_ns in components(results):
        hops += 1
        transit[kind].append(max(t_ns, 0) / 1e6)
        if kind == "to_join":
            continue
        hw = hardware_of.get((stage, variant))
        curve = curves.get((variant, hw)) if hw else None
        if curve is not None:
            ratios[key(variant, hw)].append(s_ns / 1e6 / curve.ms(batch))
    if not hops:
        raise CalibrationFitError("no hop carries received_ns: the run was made before hop timings recorded "
                                  "it; run it again with this version")
    if not ratios:
        raise CalibrationFitError(f"no hop's variant has a profile: hops ran {sorted(hardware_of)}, "
                                  f"profiles are {sorted(curves)}")
    service = {k: {"scale": float(np.mean(v)), "samples": len(v)} for k, v in sorted(ratios.items())}
    spread = np.concatenate([np.asarray(v) / service[k]["scale"] for k, v in ratios.items()])
    return {"fitted_at": now_iso(), "source": source, "machine": machine_info(), "service": service,
            "service_cv": float(np.std(spread)),
            "transit_ms": {k: [float(x) for x in np.percentile(v, QUANTILES)] for k, v in sorted(transit.items())},
            "samples": {"hops": hops, "results": len(results)}}


def network(doc: Mapping[str, Any] | None) -> Network | None:
    """The estimator's Kafka transits from a calibration (a kind not measured, e.g. no join in the
    pipeline, takes ``between``'s; the results hop takes none, see the module docstring)."""
    if not doc or not doc.get("transit_ms"):
        return None
    q = doc["transit_ms"]
    base = q.get("between") or q.get("ingress") or next(iter(q.values()))
    ingress, between = Transit.empirical(q.get("ingress", base)), Transit.empirical(q.get("between", base))
    return Network(ingress, between, Transit.empirical(q.get("to_join", base)), Transit.constant(0.0))


def service_time(doc: Mapping[str, Any] | None) -> ServiceTime:
    cv = float(doc.get("service_cv", 0.0)) if doc else 0.0
    return ServiceTime("lognormal", cv) if cv >= MIN_CV else ServiceTime()


def summary_lines(doc: Mapping[str, Any]) -> list[str]:
    """A person's view of a calibration."""
    lines = [f"calibration v{doc.get('version', '?')} from {doc.get('source') or '?'} "
             f"({doc['samples']['hops']} hops of {doc['samples']['results']} results)"]
    for k, v in doc["service"].items():
        lines.append(f"  service {k:<24} x{v['scale']:.2f} of the profile ({v['samples']} items)")
    lines.append(f"  service spread (cv)            {doc['service_cv']:.2f}")
    for kind, q in doc["transit_ms"].items():
        lines.append(f"  transit {kind:<10} p50 {q[100]:6.1f} ms  p99 {q[198]:6.1f} ms  "
                     f"max {q[-1]:6.1f} ms")
    return lines
