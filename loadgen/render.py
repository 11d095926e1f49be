"""A Summary as JSON and as a short text table, and the report directory (JSON + text + plots).

JSON is strict (NaN becomes null) so any tool can read ``summary.json``.
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from loadgen.report import LATE, LatencyStats, Summary


def to_jsonable(summary: Summary) -> dict[str, Any]:
    doc = _clean(dataclasses.asdict(summary))
    if summary.lag is not None:
        doc["lag"]["kept_up"] = summary.lag.kept_up
        doc["lag"]["verdict"] = summary.lag.verdict()
    return doc


def _clean(obj: Any) -> Any:
    if isinstance(obj, float):
        return None if math.isnan(obj) or math.isinf(obj) else obj
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def _ms(v: float) -> str:
    return "-" if math.isnan(v) else f"{v:.1f}"


def _lat_row(name: str, s: LatencyStats) -> str:
    return (f"  {name:<26}{s.count:>9}  {_ms(s.p50_ms):>8} {_ms(s.p95_ms):>8} {_ms(s.p99_ms):>8} "
            f"{_ms(s.p999_ms):>8} {_ms(s.max_ms):>8}")


def format_table(summary: Summary) -> str:
    s = summary
    lines = [
        f"{s.label or s.pipeline} [{s.source}]  SLO {s.slo_ms:g} ms  duration {s.duration_s:.1f} s",
        f"  requests {s.requests}  done {s.done}  dropped {s.dropped}  errors {s.errors}  "
        f"missing {s.missing}" + (f"  duplicates {s.duplicates}" if s.duplicates else ""),
        f"  SLO attainment {100 * s.attainment:.2f}%   mean accuracy "
        + ("-" if s.mean_accuracy is None else f"{s.mean_accuracy:.4f}"),
        f"  cost ${s.cost_total_usd:.4f} total, ${s.cost_mean_per_hour:.3f}/h mean",
        "",
        f"  {'latency (ms)':<26}{'count':>9}  {'p50':>8} {'p95':>8} {'p99':>8} {'p99.9':>8} {'max':>8}",
        _lat_row(f"end-to-end ({LATE})", s.latency),
    ]
    for st in s.stages:
        if st.queue.count:
            lines.append(_lat_row(f"{st.stage} queue", st.queue))
            lines.append(_lat_row(f"{st.stage} service", st.service))
        else:
            lines.append(_lat_row(f"{st.stage} residence", st.residence))
    for st in s.stages:
        used = ", ".join(f"{v} x{n}" for v, n in st.variants.items())
        batch = "-" if st.mean_batch is None else f"{st.mean_batch:.2f}"
        lines.append(f"  {st.stage}: mean batch {batch}; variants {used}")
    if s.drops_by_reason:
        lines.append("  drops: " + ", ".join(f"{k} {v}" for k, v in s.drops_by_reason.items()))
    if s.errors_by_reason:
        lines.append("  errors: " + ", ".join(f"{k} {v}" for k, v in s.errors_by_reason.items()))
    if s.lag is not None:
        lines.append(f"  load generator: {s.lag.verdict()}")
    lines.extend(f"  note: {n}" for n in s.notes)
    return "\n".join(lines)


def write_report(summary: Summary, out_dir: str | Path, *, plots: bool = True) -> list[Path]:
    """Write summary.json, summary.txt and (unless ``plots=False``) the PNG plots; returns the files."""
    from loadgen.plots import write_plots  # matplotlib only when plotting

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    js = out / "summary.json"
    js.write_text(json.dumps(to_jsonable(summary), indent=1, allow_nan=False) + "\n")
    txt = out / "summary.txt"
    txt.write_text(format_table(summary) + "\n")
    files = [js, txt]
    if plots:
        files += write_plots(summary, out)
    return files
