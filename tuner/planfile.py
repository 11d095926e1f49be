"""The tuner plan file: what the planner hands the tuner, as JSON (no pickle).

    {"pipeline": "image-classify", "mean_rate_qps": 100.4,
     "windows_s": [0.05, 0.1, ...], "rates_qps": [320.0, 250.0, ...],
     "stages": [{"stage": "detect", "replicas": 4, "mu_qps": 30.0, "visit_ratio": 1.0}, ...],
     "capacity": [{"stage": "detect", "rate_qps": 120.0, "window_qps": [900.0, 520.0, ...],
                   "variant": "yolo-s", "service_ms": [31.0, 52.0, 95.0],
                   "ladder": [{"variant": "yolo-s", "accuracy": 0.89, "share": 1.0, "rate_qps": 30.0,
                               "window_qps": [225.0, 130.0, ...], "service_ms": [31.0, 52.0, 95.0]},
                              {"variant": "yolo-n", "accuracy": 0.55, "share": 0.0, ...}]}, ...]}

It is the TunerHandoff record's shape (``schemas/TunerHandoff.avsc``, which adds ``epoch`` and
``at_ns``): the planner builds it (``slipstream.planner.service.handoff_record``) and publishes it on the control
topic, where the tuner follows it; a file holds the same document. ``windows_s``/``rates_qps`` are the sample trace's envelope (``slipstream.tuner.envelope.envelope``),
``mu_qps`` the single-replica throughput at the planned (variant, hardware, batch) and ``visit_ratio``
the stage's s_m, ``capacity`` what the planned replicas serve (``slipstream.planner.capacity``; optional) and
the batch service times that assumes (``service_ms`` by batch size, for ``variant``; the tuner's pace);
a loki plan's ``ladder`` (optional): the variants the stage's pool keeps loaded, with the plan's
share and what one replica serves on each (``slipstream.tuner.ladder``; the tuner's accuracy scaling).
:func:`plan_for_pipeline` builds one from a sample trace and per-stage numbers.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..schemas.records import TunerHandoff
from ..streams.spec import Pipeline
from .envelope import EnvelopeSnapshot, doubling_windows
from .ladder import Rung
from .policy import StageSizing, TunerPlan


class PlanFileError(ValueError):
    """A tuner plan file that does not validate; the message names the field."""


def to_dict(plan: TunerPlan, pipeline: str) -> dict[str, Any]:
    return {"pipeline": pipeline, "mean_rate_qps": plan.mean_rate_qps,
            "windows_s": list(plan.envelope.windows_s), "rates_qps": list(plan.envelope.rates_qps),
            "stages": [{"stage": s.stage, "replicas": s.replicas, "mu_qps": s.mu_qps,
                        "visit_ratio": s.visit_ratio} for s in plan.stages],
            "capacity": [{"stage": s.stage, "rate_qps": s.capacity_qps, "window_qps": list(s.window_capacity_qps),
                          "variant": s.variant, "service_ms": list(s.service_ms),
                          "ladder": [{"variant": r.variant, "accuracy": r.accuracy, "share": r.share,
                                      "rate_qps": r.rate_qps, "window_qps": list(r.window_qps),
                                      "service_ms": list(r.service_ms), "cpu_ms_per_item": 0.0} for r in s.ladder],
                          "cpu_ms_per_item": 0.0}
                         for s in plan.stages if s.window_capacity_qps],
            "host": None}  # a plan file knows no host: its capacity is the replicas' (control_io)


def _rung(doc: Mapping[str, Any]) -> Rung:
    return Rung(str(doc["variant"]), float(doc["accuracy"]), float(doc["share"]), float(doc["rate_qps"]),
                tuple(float(x) for x in doc["window_qps"]), tuple(float(x) for x in doc.get("service_ms") or ()))


def from_dict(doc: Mapping[str, Any], *, pipeline: Pipeline | None = None) -> TunerPlan:
    """Validate a plan document (and, given the pipeline, that its stages are the pipeline's). A
    document without ``capacity`` sizes every stage to the sample's envelope."""
    try:
        windows = tuple(float(w) for w in doc["windows_s"])
        rates = tuple(float(r) for r in doc["rates_qps"])
        cap = {str(c["stage"]): (float(c["rate_qps"]), tuple(float(x) for x in c["window_qps"]),
                                 str(c.get("variant") or ""), tuple(float(x) for x in c.get("service_ms") or ()),
                                 tuple(_rung(r) for r in c.get("ladder") or ()))
               for c in doc.get("capacity") or ()}
        stages = tuple(StageSizing(str(s["stage"]), int(s["replicas"]), float(s["mu_qps"]),
                                 float(s["visit_ratio"]), *cap.get(str(s["stage"]), (0.0, ())))
                       for s in doc["stages"])
        plan = TunerPlan(EnvelopeSnapshot(windows, rates), float(doc["mean_rate_qps"]), stages)
    except KeyError as exc:
        raise PlanFileError(f"tuner plan: missing field {exc}") from None
    except (TypeError, ValueError) as exc:
        raise PlanFileError(f"tuner plan: {exc}") from None
    if len(windows) != len(rates) or not windows or list(windows) != sorted(windows):
        raise PlanFileError("tuner plan: windows_s must be sorted and as long as rates_qps")
    if pipeline is not None:
        if doc.get("pipeline") not in (None, pipeline.name):
            raise PlanFileError(f"tuner plan: pipeline {doc.get('pipeline')!r}, expected {pipeline.name!r}")
        names = {s.name for s in pipeline.stages}
        unknown = [s.stage for s in stages if s.stage not in names]
        if unknown:
            raise PlanFileError(f"tuner plan: stages {unknown} are not in pipeline {pipeline.name!r}")
        odd = [f"{s.stage}/{r.variant}" for s in stages for r in s.ladder
               if r.variant not in {v.name for v in pipeline.stage(s.stage).variants}]
        if odd:
            raise PlanFileError(f"tuner plan: ladder variants {odd} are not in pipeline {pipeline.name!r}")
    return plan


def from_handoff(rec: TunerHandoff, *, pipeline: Pipeline | None = None) -> TunerPlan:
    """:func:`from_dict` of a TunerHandoff record (the control topic's form of this document)."""
    return from_dict(rec.to_dict(), pipeline=pipeline)


def load(path: str | Path, *, pipeline: Pipeline | None = None) -> TunerPlan:
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise PlanFileError(f"{path}: no such tuner plan file") from None
    except json.JSONDecodeError as exc:
        raise PlanFileError(f"{path}: not JSON: {exc}") from None
    return from_dict(doc, pipeline=pipeline)


def save(plan: TunerPlan, pipeline: str, path: str | Path) -> None:
    Path(path).write_text(json.dumps(to_dict(plan, pipeline), indent=2) + "\n")


def default_service_time_s(pipeline: Pipeline, mu_qps: Mapping[str, float]) -> float:
    """InferLine's T_s, approximated as the longest path's sum of per-item times 1/mu (>= 10 ms)."""
    longest = max(sum(1.0 / mu_qps[s] for s in path) for path in pipeline.paths())
    return max(0.01, longest)


def plan_for_pipeline(pipeline: Pipeline, arrivals_s: np.ndarray, mu_qps: Mapping[str, float],
                      replicas: Mapping[str, int] | None = None,
                      service_time_s: float | None = None) -> TunerPlan:
    """A plan from a sample trace: visit ratios from the spec, replicas from ``replicas`` or the stage
    defaults, windows doubling from the service time up to 60 s."""
    missing = [s.name for s in pipeline.stages if s.name not in mu_qps]
    if missing:
        raise PlanFileError(f"mu_qps missing for stages {missing}")
    reps = replicas or {}
    stages = tuple(StageSizing(s.name, int(reps.get(s.name, s.defaults.replicas)), float(mu_qps[s.name]),
                             pipeline.visit_ratio(s.name)) for s in pipeline.stages)
    ts = service_time_s if service_time_s is not None else default_service_time_s(pipeline, mu_qps)
    return TunerPlan.from_sample(arrivals_s, doubling_windows(ts), stages)
