"""The soak test's arithmetic (pure): samples over time, growth and bounds per series, table and plots.

``slipstream soak`` samples every process's resident memory (RSS) and every consumer group's lag
(records not yet committed) at a fixed interval while a trace replays, and attainment comes from the
results afterwards. Per process the verdict is its RSS growth: the median of the last fifth of the
samples over the median of the first fifth after the warm-up (the first ``warmup_s``: models load,
caches fill). Per group: the highest lag, and the highest lag of the last fifth against that of the
first fifth (a lag that keeps climbing is a pipeline that does not keep up).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np


@dataclass(frozen=True)
class Samples:
    """One series per name, all on the time axis ``t_s`` (seconds from the start); NaN = not sampled."""

    t_s: tuple[float, ...]
    series: Mapping[str, tuple[float, ...]]


def _fifths(t: np.ndarray, y: np.ndarray, warmup_s: float) -> tuple[np.ndarray, np.ndarray]:
    keep = (t >= warmup_s) & np.isfinite(y)
    t, y = t[keep], y[keep]
    if len(y) < 2:
        return y, y
    k = max(1, len(y) // 5)
    return y[:k], y[-k:]


def growth(t_s: Sequence[float], y: Sequence[float], warmup_s: float) -> float:
    """Median of the last fifth over the median of the first fifth after ``warmup_s``, minus 1."""
    first, last = _fifths(np.asarray(t_s, dtype=float), np.asarray(y, dtype=float), warmup_s)
    if not len(first) or np.median(first) <= 0:
        return float("nan")
    return float(np.median(last) / np.median(first) - 1.0)


@dataclass(frozen=True)
class RssRow:
    process: str
    start_mb: float
    end_mb: float
    growth: float


@dataclass(frozen=True)
class LagRow:
    group: str
    max_lag: float
    first_max: float
    last_max: float


def rss_rows(s: Samples, warmup_s: float) -> list[RssRow]:
    t = np.asarray(s.t_s, dtype=float)
    out = []
    for name, ys in s.series.items():
        first, last = _fifths(t, np.asarray(ys, dtype=float), warmup_s)
        if len(first):
            out.append(RssRow(name, float(np.median(first)), float(np.median(last)), growth(t, ys, warmup_s)))
    return out


def lag_rows(s: Samples, warmup_s: float) -> list[LagRow]:
    t = np.asarray(s.t_s, dtype=float)
    out = []
    for name, ys in s.series.items():
        y = np.asarray(ys, dtype=float)
        first, last = _fifths(t, y, warmup_s)
        if len(first):
            out.append(LagRow(name, float(np.nanmax(y)), float(first.max()), float(last.max())))
    return out


def format_tables(rss: Sequence[RssRow], lag: Sequence[LagRow], attainment: float, att_windows: Sequence[float]) -> str:
    def pct(x: float) -> str:
        return "n/a" if math.isnan(x) else f"{100 * x:+.1f} %"

    lines = ["| process | RSS after warm-up (MB) | RSS at the end (MB) | growth |", "|---|---:|---:|---:|"]
    lines += [f"| {r.process} | {r.start_mb:.0f} | {r.end_mb:.0f} | {pct(r.growth)} |" for r in rss]
    lines += ["", "| consumer group | max lag | max lag, first fifth | max lag, last fifth |", "|---|---:|---:|---:|"]
    lines += [f"| {r.group} | {r.max_lag:.0f} | {r.first_max:.0f} | {r.last_max:.0f} |" for r in lag]
    w = [x for x in att_windows if not math.isnan(x)]
    lines += ["", f"attainment {100 * attainment:.2f} % overall"
              + (f"; per window: min {100 * min(w):.1f} %, median {100 * float(np.median(w)):.1f} %" if w else "")]
    return "\n".join(lines)


def plot_series(s: Samples, path, title: str, ylabel: str, warmup_s: float | None = None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    t = np.asarray(s.t_s, dtype=float) / 60.0
    for name, ys in s.series.items():
        ax.plot(t, ys, lw=1, label=name)
    if warmup_s:
        ax.axvline(warmup_s / 60.0, color="tab:gray", ls=":", lw=1, label="end of warm-up")
    ax.set_xlabel("minutes")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="x-small", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
