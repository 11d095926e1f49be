"""What the planner builds from the profile store (``slipstream.streams.profile_store``: the file format, shared
with the stage workers, which seed their latency predictors from it): the planning problem of a
pipeline, and imports of published tables.

The planner fits ``slipstream.streams.latency.LatencyCurve`` to the ``percentile`` column of the points (IPA:
quadratic, linear fallback). ``import_csv`` reads the published table layout of
``UMass-LIDS/Loki aggregate_profiled.csv`` (columns Model, Accel, Trials, batchsize, 50th_pct,
90th_pct, avg_latency(ms), Min, Max, Accuracy, Normalized_Accuracy); it has no p99, so imported
profiles use the 90th percentile (the mean where a row has none), and their accuracy is Accuracy / 100.
"""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from ..streams.arrivals import peak_rate_sliding, poisson_arrivals
from ..streams.profile_store import (FORMAT_VERSION, BatchPoint, Profile, ProfileError, ProfileStore,  # noqa: F401
                                   lookup, machine_info, now_iso, slug)
from ..streams.spec import Pipeline
from . import calibrate
from .problem import EdgeOption, HardwareOption, Problem, StageOption, VariantOption


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
                # some published rows have no 90th percentile: fall back to the mean, as slipstream.loadgen.published does
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
                          sim_seconds: float = 60.0, cores: int | None = None, **options) -> Problem:
    """The planning problem of a pipeline spec, with latency from the profile store.

    A variant's profile is looked up by its name, then by its model name, on every hardware of the
    pipeline's catalog (with ``cores``, only the CPU entries whose threads fit in that many cores: a
    2-thread replica on one core runs at half its profiled pace); a variant with no profile at all
    is an error naming it."""
    catalog = {name: h for name, h in pipe.hardware.items()
               if cores is None or h.kind != "cpu" or h.threads <= cores}
    stages = []
    for st in pipe.stages:
        variants = []
        for v in st.variants:
            lat = {}
            for h in catalog:
                prof = lookup(store, v, h)
                if prof is not None:
                    lat[h] = prof.curve()
            if lat:
                variants.append(VariantOption(v.name, v.accuracy, lat))
        if not variants:
            raise ProfileError(f"stage {st.name!r}: no profile in {store.root} for any of its variants "
                               f"{[v.name for v in st.variants]} on hardware {sorted(catalog)}")
        stages.append(StageOption(st.name, tuple(variants)))
    hw = {h.name: HardwareOption(h.name, h.cost_per_hour, h.kind, h.threads) for h in catalog.values()}
    if arrivals_s is None:
        if rate_qps is None:
            raise ProfileError("give an arrival trace or a rate")
        arrivals_s = poisson_arrivals(rate_qps, sim_seconds, options.get("seed", 0))
    rate = rate_qps if rate_qps is not None else peak_rate_sliding(arrivals_s, rate_window_s)
    edges = tuple(EdgeOption(e.src, e.dst, e.fanout, e.probability) for e in pipe.edges)
    parts = min(s.defaults.partitions for s in pipe.stages)
    options.setdefault("min_partitions", parts)
    if store.calibration:  # its measured transits replace hop_ms; the store's curves are scaled already
        options.setdefault("network", calibrate.network(store.calibration))
        options.setdefault("service", calibrate.service_time(store.calibration))
        options.setdefault("host", calibrate.host_model(store.calibration))
    return Problem(slo_ms=pipe.slo_ms, rate_qps=rate, hardware=hw, stages=tuple(stages), edges=edges,
                   arrivals_s=np.asarray(arrivals_s, dtype=float), name=pipe.name, **options)
