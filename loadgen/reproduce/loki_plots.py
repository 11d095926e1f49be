"""The Loki reproduction's PNG plots (matplotlib, Agg through ``slipstream.loadgen.plots``): capacity, the day
of demand (Fig. 5's panels) and the SLO sweep (Fig. 8's)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from ..plots import _save, plt

if TYPE_CHECKING:  # for annotations only: loki.py imports this module
    from .loki import Experiment, Point

PALETTE = ("tab:blue", "tab:red")


def colours(modes: Sequence[str]) -> dict[str, str]:
    """One colour per mode, in the experiment's order of modes."""
    return dict(zip(modes, PALETTE))


def capacity(exp: Experiment, cap: Mapping[str, float], target: float, path: Path) -> Path:
    """Accuracy and violations against demand, every point measured, capacities marked (Fig. 1);
    ``cap``: mode -> its capacity, in the experiment's order of modes."""
    colour = colours(list(cap))
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for mode in cap:
        pts = sorted((p for (m, _, slo), p in exp.cache.items() if m == mode and slo == exp.settings.slo_ms),
                     key=lambda p: p.demand)
        d = [p.demand for p in pts]
        ax.plot(d, [p.accuracy for p in pts], "o-", color=colour[mode], label=mode)
        ax2.plot(d, [100 * p.violations for p in pts], "o-", color=colour[mode], label=mode)
        for a in (ax, ax2):
            a.axvline(cap[mode], color=colour[mode], ls=":", lw=1)
    ax.set_ylabel("pipeline accuracy (normalised)")
    ax.set_title(f"Loki traffic chain, {exp.settings.servers} GPUs, SLO {exp.settings.slo_ms:g} ms: "
                 "effective capacity (dotted)")
    ax.legend(loc="lower left")
    ax2.axhline(100 * (1 - target), color="black", ls="--", lw=1, label=f"{100 * (1 - target):g} %")
    ax2.set_yscale("symlog", linthresh=1)
    ax2.set_ylim(bottom=0)
    ax2.set_ylabel("SLO violations (%)")
    ax2.set_xlabel("demand (qps)")
    ax2.set_xscale("log")
    for a in (ax, ax2):
        a.grid(alpha=0.3, which="both")
    return _save(fig, path)


def day(demand: Sequence[float], runs: Mapping[str, Sequence[Point]], shape_name: str, path: Path) -> Path:
    """Demand, accuracy, violations and servers per block of the day (Fig. 5's four panels); ``runs``:
    mode -> its points, in the experiment's order of modes."""
    colour = colours(list(runs))
    t = np.arange(len(demand))
    fig, axes = plt.subplots(4, 1, figsize=(8, 8), sharex=True)
    axes[0].step(t, demand, where="mid", color="black")
    axes[0].set_ylabel("demand (qps)")
    axes[0].set_title(f"a day of demand: {shape_name}")
    for mode, pts in runs.items():
        axes[1].step(t, [p.accuracy for p in pts], where="mid", color=colour[mode], label=mode)
        axes[2].step(t, [100 * p.violations for p in pts], where="mid", color=colour[mode], label=mode)
        axes[3].step(t, [p.servers for p in pts], where="mid", color=colour[mode], label=mode)
    axes[1].set_ylabel("accuracy")
    axes[1].legend(loc="lower left", fontsize="small")
    axes[2].set_ylabel("violations (%)")
    axes[3].set_ylabel("servers")
    axes[3].set_xlabel("block of the day")
    for a in axes:
        a.grid(alpha=0.3)
    return _save(fig, path)


def slo(sweep: Mapping[str, Sequence[Point]], modes: Sequence[str], path: Path) -> Path:
    """Accuracy and violations against the SLO, one line per (mode, demand) (Fig. 8)."""
    by_mode = colours(modes)
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(7, 5.5), sharex=True)
    for (label, pts), style in zip(sweep.items(), ("o-", "s--", "^-")):
        x = [p.slo_ms for p in pts]
        colour = by_mode[pts[0].mode]
        ax.plot(x, [p.accuracy for p in pts], style, color=colour, label=label)
        ax2.plot(x, [100 * p.violations for p in pts], style, color=colour, label=label)
    ax.set_ylabel("accuracy")
    ax.set_title("SLO sweep (fresh-trace violations)")
    ax.legend(loc="lower right")
    ax2.set_ylabel("SLO violations (%)")
    ax2.set_xlabel("SLO (ms)")
    for a in (ax, ax2):
        a.grid(alpha=0.3)
    return _save(fig, path)
