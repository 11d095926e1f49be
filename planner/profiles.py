"""The profile store: one versioned JSON file per (variant, hardware), and what is built from it.

Layout: ``<dir>/<variant>@<hardware>.json``::

    {"format": 1, "variant": "lite0", "hardware": "cpu-4", "accuracy": 0.753 | null,
     "machine": {"hostname": ..., "platform": ..., "processor": ..., "cpus": ...},
     "measured_at": "2026-01-01T00:00:00Z", "source": "measured" | "imported:<csv path>",
     "percentile": "p99",                 # which column the planner fits (p90 for imported tables)
     "points": {"1": {"p50_ms": 4.1, "p99_ms": 5.0, "reps": 200}, ...}}

The planner fits ``streams.latency.LatencyCurve`` to the ``percentile`` column of the points (IPA:
quadratic, linear fallback). ``import_csv`` reads the published table layout of
``UMass-LIDS/Loki aggregate_profiled.csv`` (columns Model, Accel, Trials, batchsize, 50th_pct,
90th_pct, avg_latency(ms), Min, Max, Accuracy, Normalized_Accuracy); it has no p99, so imported
profiles use the 90th percentile (the mean where a row has none), and their accuracy is Accuracy / 100.
"""
from __future__ import annotations

import csv
import json
import os
import platform
import re
import socket
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping

import numpy as np

from planner.problem import (EdgeOption, HardwareOption, Problem, StageOption, VariantOption,
                             peak_rate, poisson_trace)
from streams.latency import LatencyCurve
from streams.spec import Pipeline

FORMAT_VERSION = 1


class ProfileError(ValueError):
    """A profile file or table that cannot be used; the message names the file and field."""


@dataclass(frozen=True)
class BatchPoint:
    p50_ms: float
    p99_ms: float
    reps: int = 0
    p90_ms: float | None = None


@dataclass(frozen=True)
class Profile:
    variant: str
    hardware: str
    points: Mapping[int, BatchPoint]
    machine: Mapping[str, object] = field(default_factory=dict)
    measured_at: str = ""
    source: str = "measured"
    percentile: str = "p99"
    accuracy: float | None = None

    def curve(self) -> LatencyCurve:
        key = f"{self.percentile}_ms"
        pts = {b: getattr(p, key) if getattr(p, key) is not None else p.p99_ms for b, p in self.points.items()}
        return LatencyCurve.fit(pts)

    def to_json(self) -> dict:
        return {"format": FORMAT_VERSION, "variant": self.variant, "hardware": self.hardware,
                "accuracy": self.accuracy, "machine": dict(self.machine), "measured_at": self.measured_at,
                "source": self.source, "percentile": self.percentile,
                "points": {str(b): {k: v for k, v in p.__dict__.items() if v is not None}
                           for b, p in sorted(self.points.items())}}


def machine_info() -> dict[str, object]:
    return {"hostname": socket.gethostname(), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(), "cpus": os.cpu_count()}


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")


class ProfileStore:
    """A directory of profile files. Reads validate the format version; writes are atomic."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def path(self, variant: str, hardware: str) -> Path:
        return self.root / f"{variant}@{hardware}.json"

    def save(self, profile: Profile) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        p = self.path(profile.variant, profile.hardware)
        tmp = p.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(profile.to_json(), indent=1, sort_keys=True))
        tmp.replace(p)
        return p

    def load_file(self, p: Path) -> Profile:
        try:
            doc = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ProfileError(f"{p}: unreadable profile: {exc}") from None
        if doc.get("format") != FORMAT_VERSION:
            raise ProfileError(f"{p}: format: expected {FORMAT_VERSION}, got {doc.get('format')!r}")
        try:
            points = {int(b): BatchPoint(**v) for b, v in doc["points"].items()}
            return Profile(doc["variant"], doc["hardware"], points, doc.get("machine", {}),
                           doc.get("measured_at", ""), doc.get("source", ""), doc.get("percentile", "p99"),
                           doc.get("accuracy"))
        except (KeyError, TypeError, ValueError) as exc:
            raise ProfileError(f"{p}: points: {exc}") from None

    def get(self, variant: str, hardware: str) -> Profile | None:
        p = self.path(variant, hardware)
        return self.load_file(p) if p.exists() else None

    def all(self) -> list[Profile]:
        return [self.load_file(p) for p in sorted(self.root.glob("*@*.json"))]


def import_csv(path: str | Path, store: ProfileStore, *, models: set[str] | None = None) -> list[Profile]:
    """Import a published profile table (Loki's aggregate_profiled.csv layout) into the store."""
    rows: dict[tuple[str, str], dict[int, BatchPoint]] = {}
    accuracy: dict[tuple[str, str], float] = {}
    p = Path(path)
    with p.open(newline="") as fh:
        reader = csv.DictReader(fh)
        need = {"Model", "Accel", "batchsize", "50th_pct", "90th_pct"}
        missing = need - set(reader.fieldnames or ())
        if missing:
            raise ProfileError(f"{p}: missing columns {sorted(missing)}")
        for i, row in enumerate(reader, start=2):
            if models and row["Model"] not in models:
                continue
            try:
                key = (slug(row["Model"]), slug(row["Accel"]))
                b = int(float(row["batchsize"]))
                avg = row.get("avg_latency(ms)") or ""
                # some published rows have no 90th percentile: fall back to the mean, as loadgen.published does
                p90 = float(row["90th_pct"] or avg)
                p50 = float(row["50th_pct"] or avg)
            except (TypeError, ValueError) as exc:
                raise ProfileError(f"{p}: line {i}: {exc}") from None
            rows.setdefault(key, {})[b] = BatchPoint(p50_ms=p50, p99_ms=p90, reps=int(float(row.get("Trials") or 0)),
                                                     p90_ms=p90)
            if row.get("Accuracy"):
                accuracy[key] = float(row["Accuracy"]) / 100.0
    out = []
    for (variant, hw), pts in sorted(rows.items()):
        prof = Profile(variant, hw, pts, {"source_table": str(p)}, now_iso(), f"imported:{p}", "p90",
                       accuracy.get((variant, hw)))
        store.save(prof)
        out.append(prof)
    return out


def problem_from_pipeline(pipe: Pipeline, store: ProfileStore, *, arrivals_s: np.ndarray | None = None,
                          rate_qps: float | None = None, rate_window_s: float = 1.0,
                          sim_seconds: float = 60.0, **options) -> Problem:
    """The planning problem of a pipeline spec, with latency from the profile store.

    A variant's profile is looked up by its name, then by its model name, on every hardware of the
    pipeline's catalog; a variant with no profile at all is an error naming it."""
    stages = []
    for st in pipe.stages:
        variants = []
        for v in st.variants:
            lat = {}
            for h in pipe.hardware:
                prof = store.get(v.name, h) or store.get(slug(v.model), h)
                if prof is not None:
                    lat[h] = prof.curve()
            if lat:
                variants.append(VariantOption(v.name, v.accuracy, lat))
        if not variants:
            raise ProfileError(f"stage {st.name!r}: no profile in {store.root} for any of its variants "
                               f"{[v.name for v in st.variants]} on hardware {sorted(pipe.hardware)}")
        stages.append(StageOption(st.name, tuple(variants)))
    hw = {h.name: HardwareOption(h.name, h.cost_per_hour, h.kind, h.threads) for h in pipe.hardware.values()}
    if arrivals_s is None:
        if rate_qps is None:
            raise ProfileError("give an arrival trace or a rate")
        arrivals_s = poisson_trace(rate_qps, sim_seconds, options.get("seed", 0))
    rate = rate_qps if rate_qps is not None else peak_rate(arrivals_s, rate_window_s)
    edges = tuple(EdgeOption(e.src, e.dst, e.fanout, e.probability) for e in pipe.edges)
    parts = min(s.defaults.partitions for s in pipe.stages)
    options.setdefault("min_partitions", parts)
    return Problem(slo_ms=pipe.slo_ms, rate_qps=rate, hardware=hw, stages=tuple(stages), edges=edges,
                   arrivals_s=np.asarray(arrivals_s, dtype=float), name=pipe.name, **options)
