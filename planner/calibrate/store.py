"""The calibration document across versions, and as a person reads it: a new fit keeps what the
version before measured where its runs measured nothing (service scales of variants it did not run,
scales at batch sizes and spreads at batch lengths it did not see), and :func:`summary_lines` prints it.
Storing and numbering versions is ``slipstream.streams.calibration``'s.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ...streams.calibration import unmeasured_scale


def carried_forward(doc: dict, previous: Mapping[str, Any] | None) -> dict:
    """``doc`` with the service scales of ``previous`` for every variant and hardware ``doc``'s runs
    did not run (marked ``carried_from``: the version, else the source, they came from): a run
    measures what it ran, and the rest keeps what was measured before rather than the bare profile.
    The same per batch size (:func:`merged_sizes`): a run that ran a variant at one size keeps the
    scales measured before at its other sizes, and its spread at lengths it did not run
    (:func:`merged_spread`)."""
    old = (previous or {}).get("service", {})
    origin = f"v{previous['version']}" if previous and "version" in previous else (previous or {}).get("source", "?")
    carried = {k: {**v, "carried_from": v.get("carried_from", origin)}
               for k, v in old.items() if k not in doc["service"]}
    merged = {k: m for k, v in doc["service"].items() if k in old
              and (m := merged_spread(merged_sizes(v, old[k], origin), old[k], origin)) is not v}
    return {**doc, "service": {**doc["service"], **merged, **carried}} if carried or merged else doc


def merged_sizes(new: Mapping[str, Any], old: Mapping[str, Any], origin: str) -> Mapping[str, Any]:
    """A variant's new service entry with the per-size scales (``by_batch``) of its old one at the
    batch sizes the new runs did not measure, rescaled by how the two compare at the sizes both
    measured (the geometric mean of new / old there; the new runs' pace sets the level, the older
    measurement the shape); ``new`` itself when the old entry has no sizes to add. Without this, a
    refit on a run of batches of 1 (the demo's plan) would give resize-260 its batch-1 scale (x1.77)
    at every size, where batches of 2-8 run at x0.86-1.09, and the estimator would run a baseline's
    batches of 8 at 1.7x their measured time and drop too many."""
    old_by = old.get("by_batch") or {}
    own = new.get("by_batch") or ({b: new["scale"] for b in new.get("sizes", {})} if len(new.get("sizes", {})) == 1 else {})
    extra = {b: v for b, v in old_by.items() if b not in own}
    if not own or not extra:
        return new
    both = [b for b in own if b in old_by]
    level = float(np.exp(np.mean([np.log(own[b] / old_by[b]) for b in both]))) if both else 1.0
    return {**new, "by_batch": {**{b: v * level for b, v in extra.items()}, **own},
            "by_batch_carried_from": {"from": old.get("carried_from", origin), "sizes": sorted(extra, key=int),
                                      "level": level}}


def merged_spread(new: Mapping[str, Any], old: Mapping[str, Any], origin: str) -> Mapping[str, Any]:
    """A variant's new service entry with the spread points (``cv_by_ms``) of its old one at batch
    lengths more than 2x beyond the new points (a spread bin spans 2x), where the new runs measured
    nothing; ``new`` itself when there are none (or either has no spread of its own)."""
    mine, before = new.get("cv_by_ms") or [], old.get("cv_by_ms") or []
    if not mine or not before:
        return new
    lo, hi = min(p[0] for p in mine), max(p[0] for p in mine)
    extra = [p for p in before if p[0] > 2 * hi or p[0] < lo / 2]
    if not extra:
        return new
    return {**new, "cv_by_ms": sorted([*mine, *extra]),
            "cv_carried_from": {"from": old.get("carried_from", origin), "ms": [p[0] for p in extra]}}


def _at(doc: Mapping[str, Any], values: Sequence[float], pct: float) -> float:
    return float(np.interp(pct, doc.get("quantile_pct") or np.linspace(0.0, 100.0, len(values)), values))


def summary_lines(doc: Mapping[str, Any]) -> list[str]:
    """A person's view of a calibration."""
    runs = doc["samples"].get("runs", 1)
    lines = [f"calibration v{doc.get('version', '?')} from {doc.get('source') or '?'} "
             f"({doc['samples']['hops']} hops of {doc['samples']['results']} results"
             f"{f' of {runs} runs' if runs > 1 else ''})"]
    h = doc.get("host")
    lines.append(f"  host: batches share {h['free_cores']:.2f} of {h['cores']:.0f} cores (mean concurrency "
                 f"{h['mean_concurrency']:.2f})" if h else "  host: core sharing explains nothing; left out")
    for k, v in doc["service"].items():
        came = f"carried from {v['carried_from']}" if "carried_from" in v else f"{v['samples']} batches"
        lines.append(f"  service {k:<24} x{v['scale']:.2f} of the profile ({came})")
        if v.get("cv_by_ms"):
            lines.append("    its spread (cv)              " + "  ".join(f"{ms:.0f} ms: {c:.2f}" for ms, c in v["cv_by_ms"]))
        if v.get("by_batch"):
            lines.append("    by batch size                " + "  ".join(f"{b}: x{s:.2f}" for b, s in
                                                                     sorted(v["by_batch"].items(), key=lambda x: int(x[0]))))
    for hw in sorted({k.split("@", 1)[1] for k in doc["service"] if "@" in k}):
        lines.append(f"  service of a variant not run   x{unmeasured_scale(doc, hw):.2f} on {hw} (the median of the measured)")
    lines.append(f"  service spread (cv)            {doc['service_cv']:.2f} within a second")
    if doc.get("service_cv_by_ms"):
        lines.append("    by batch duration             " + "  ".join(f"{ms:.0f} ms: {c:.2f}"
                                                                    for ms, c in doc["service_cv_by_ms"]))
    pace = (doc.get("slowdown") or {}).get("factors") or [1.0]
    lines.append(f"  pace from second to second     p10 {np.percentile(pace, 10):.2f}  p90 "
                 f"{np.percentile(pace, 90):.2f}  max {max(pace):.2f} ({len(pace)} seconds)")
    for kind, q in doc["transit_ms"].items():
        lines.append(f"  transit {kind:<10} p50 {_at(doc, q, 50):6.1f} ms  p99 {_at(doc, q, 99):6.1f} ms  "
                     f"max {q[-1]:6.1f} ms")
    if doc.get("dispatch_ms"):
        q = doc["dispatch_ms"]
        lines.append(f"  worker's own time per batch    p50 {_at(doc, q, 50):6.1f} ms  p99 {_at(doc, q, 99):6.1f} ms  "
                     f"max {q[-1]:6.1f} ms")
    return lines
