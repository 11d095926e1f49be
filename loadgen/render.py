"""A Summary as JSON and as a short text table, and the report directory (JSON + text + plots).

JSON is strict (NaN and infinity become null) so any tool can read ``summary.json``;
:func:`read_summary` reads it back (a latency percentile that is null over requests that exist is
infinite: more than that share was not done in time).
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from .report import LATE, LatencyStats, Summary


def to_jsonable(summary: Summary) -> dict[str, Any]:
    doc = _clean(dataclasses.asdict(summary))
    if summary.lag is not None:
        doc["lag"]["kept_up"] = summary.lag.kept_up
        doc["lag"]["verdict"] = summary.lag.verdict()
    return doc


def read_summary(path: str | Path) -> Summary:
    """The Summary :func:`write_report` wrote to ``path`` (``summary.json``)."""
    from .report import Envelope, Series, StageBreakdown
    from .schedule import LagStats

    d = json.loads(Path(path).read_text())

    def stats(x: dict) -> LatencyStats:
        gone = math.inf if x["count"] else math.nan
        return LatencyStats(x["count"], *(gone if x[k] is None else x[k] for k in _STATS[1:]))

    def nums(xs) -> tuple[float, ...]:
        return tuple(math.nan if v is None else v for v in xs)

    s = d["series"]
    series = Series(s["window_s"], tuple(s["t_s"]), tuple(s["sent"]), nums(s["p50_ms"]), nums(s["p99_ms"]),
                    nums(s["attainment"]), nums(s["cost_per_hour"]), {k: tuple(v) for k, v in s["replicas"].items()},
                    nums(s.get("accuracy", ())))
    stages = tuple(StageBreakdown(b["stage"], b["items"], stats(b["residence"]), stats(b["queue"]), stats(b["service"]),
                                  b["mean_batch"], b["variants"]) for b in d["stages"])
    e, lag = d.get("envelope"), d.get("lag")
    envelope = None if e is None else Envelope(tuple(e["windows_s"]), nums(e["live_qps"]),
                                               None if e["planned_qps"] is None else nums(e["planned_qps"]),
                                               e["planned_label"])
    lag = None if lag is None else LagStats(**{f.name: lag[f.name] for f in dataclasses.fields(LagStats)})
    rest = {k: d[k] for k in ("label", "pipeline", "source", "slo_ms", "duration_s", "requests", "results", "done",
                              "dropped", "errors", "missing", "attainment", "drops_by_reason", "errors_by_reason",
                              "mean_accuracy", "cost_total_usd", "cost_mean_per_hour")}
    return Summary(**rest, latency=stats(d["latency"]), stages=stages, series=series, cdf_ms=nums(d["cdf_ms"]),
                   cdf_q=tuple(d["cdf_q"]), envelope=envelope, lag=lag, duplicates=d.get("duplicates", 0),
                   notes=tuple(d.get("notes", ())))


_STATS = tuple(f.name for f in dataclasses.fields(LatencyStats))


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
    from .plots import write_plots  # matplotlib only when plotting

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
