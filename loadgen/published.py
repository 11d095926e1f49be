"""Planning problems from the published Loki/Proteus profile table, for cluster-scale simulations.

``aggregate_profiled.csv`` (research-data/UMass-LIDS+Loki, "comparison purposes only") holds batch
latency per (model, accelerator, batch 1..16) for onnxruntime on a CPU, a Pascal GPU and an Ampere
GPU, and each model's accuracy. It is read from where it lies, never copied.

Choices made here (docs/loadgen.md repeats them):
- latency: the ``90th_pct`` column (the planner trusts a high percentile), ``avg_latency(ms)`` where
  the 90th is missing; a batch size whose latency is below a smaller batch's is dropped as noise;
- accuracy: ``Accuracy`` / 100 (top-1 % for classifiers, mAP for yolov5: comparable within a family);
- hardware prices: list prices per hour, overridable: ``cpu`` 0.17 (a 4-vCPU c5.xlarge), ``pascal``
  1.46 (one P100), ``ampere`` 2.93 (one A100), the GCP/AWS on-demand figures of 2024;
- the ``traffic`` preset is Loki's traffic-analysis chain detect (yolov5) -> classify (efficientnet)
  with the fan-out factor x car share of ``branching.csv`` averaged over the detector variants (the
  estimator's edges have one fan-out; Loki's depends on the detector variant).
"""
from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ..planner.problem import EdgeOption, HardwareOption, Problem, StageOption, VariantOption
from ..streams.latency import LatencyCurve

ACCELERATORS = {"onnxruntime_cpu": "cpu", "onnxruntime_gpu_pascal": "pascal",
                "onnxruntime_gpu_ampere": "ampere"}
DEFAULT_PRICES = {"cpu": 0.17, "pascal": 1.46, "ampere": 2.93}
KINDS = {"cpu": "cpu", "pascal": "cuda", "ampere": "cuda"}


@dataclass(frozen=True)
class ModelProfile:
    model: str
    accuracy: float  # 0..1
    latency_ms: Mapping[str, Mapping[int, float]]  # hardware -> batch -> ms


def read_profiles(path: str | Path) -> dict[str, ModelProfile]:
    rows: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    acc: dict[str, float] = {}
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            hw = ACCELERATORS.get(r["Accel"])
            if hw is None:
                continue
            ms = r.get("90th_pct") or r.get("avg_latency(ms)")
            if not ms:
                continue
            rows[r["Model"]][hw][int(r["batchsize"])] = float(ms)
            acc[r["Model"]] = float(r["Accuracy"]) / 100.0
    out = {}
    for model, per_hw in rows.items():
        clean = {}
        for hw, pts in per_hw.items():
            kept, best = {}, 0.0
            for b in sorted(pts):
                if pts[b] >= best:  # latency must not fall with batch size
                    kept[b], best = pts[b], pts[b]
            clean[hw] = kept
        out[model] = ModelProfile(model, acc[model], clean)
    return out


def read_branching(path: str | Path) -> dict[str, float]:
    """Loki's detector fan-out to the car classifier: mult_factor x car_classification share."""
    with open(path, newline="") as fh:
        return {r["model"]: float(r["mult_factor"]) * float(r["car_classification"]) for r in csv.DictReader(fh)}


def build_problem(profiles: Mapping[str, ModelProfile], stages: Sequence[tuple[str, Sequence[str]]],
                  edges: Sequence[EdgeOption], *, slo_ms: float, arrivals_s: np.ndarray,
                  prices: Mapping[str, float] = DEFAULT_PRICES, hardware: Sequence[str] | None = None,
                  name: str = "published", **problem_kw) -> Problem:
    """A Problem over the given models per stage; the planning rate is the trace's peak 1 s rate."""
    hw_names = tuple(hardware or DEFAULT_PRICES)
    unknown = [h for h in hw_names if h not in prices]
    if unknown:
        raise ValueError(f"no price for hardware {unknown}")
    hw = {h: HardwareOption(h, float(prices[h]), KINDS.get(h, "cpu")) for h in hw_names}
    stage_opts = []
    for sname, models in stages:
        variants = []
        for m in models:
            if m not in profiles:
                raise ValueError(f"stage {sname}: model {m!r} is not in the profile table "
                                 f"(known: {', '.join(sorted(profiles))})")
            p = profiles[m]
            lat = {h: LatencyCurve.fit(p.latency_ms[h]) for h in hw_names if p.latency_ms.get(h)}
            if lat:
                variants.append(VariantOption(m, p.accuracy, lat))
        if not variants:
            raise ValueError(f"stage {sname}: no model has a profile on {list(hw_names)}")
        stage_opts.append(StageOption(sname, tuple(variants)))
    arr = np.sort(np.asarray(arrivals_s, dtype=float))
    peak = float(np.bincount(arr.astype(np.int64)).max()) if len(arr) else 0.0
    batch = sorted({b for p in profiles.values() for pts in p.latency_ms.values() for b in pts})
    return Problem(slo_ms=slo_ms, rate_qps=peak, hardware=hw, stages=tuple(stage_opts), edges=tuple(edges),
                   arrivals_s=arr, batch_sizes=tuple(batch), name=name, **problem_kw)


def traffic_problem(data_dir: str | Path, arrivals_s: np.ndarray, *, slo_ms: float = 250.0,
                    detectors: Sequence[str] = ("yolov5n", "yolov5s", "yolov5m"),
                    classifiers: Sequence[str] = ("efficientnet-b0", "efficientnet-b1", "efficientnet-b3"),
                    prices: Mapping[str, float] = DEFAULT_PRICES, **kw) -> Problem:
    """Loki's traffic-analysis chain on the published profiles (SLO 250 ms as in the paper)."""
    d = Path(data_dir)
    profiles = read_profiles(d / "aggregate_profiled.csv")
    fan = read_branching(d / "branching.csv")
    fanout = float(np.mean([fan[m] for m in detectors if m in fan])) if any(m in fan for m in detectors) else 1.0
    return build_problem(profiles, [("detect", detectors), ("classify", classifiers)],
                         [EdgeOption("detect", "classify", fanout=fanout)], slo_ms=slo_ms,
                         arrivals_s=arrivals_s, prices=prices, name="traffic", **kw)


def single_stage_problem(data_dir: str | Path, arrivals_s: np.ndarray, models: Sequence[str], *,
                         slo_ms: float, prices: Mapping[str, float] = DEFAULT_PRICES, **kw) -> Problem:
    profiles = read_profiles(Path(data_dir) / "aggregate_profiled.csv")
    return build_problem(profiles, [("model", models)], [], slo_ms=slo_ms, arrivals_s=arrivals_s,
                         prices=prices, name="single", **kw)
