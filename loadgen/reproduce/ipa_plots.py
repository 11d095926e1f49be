"""The IPA reproduction's PNG plot: the accuracy-cost frontier with the fixed-variant runs."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ..plots import _save, plt

if TYPE_CHECKING:  # for annotations only: ipa.py imports this module
    from .ipa import Run


def frontier(ipa: Sequence[Run], fixed: Sequence[Run], slo_ms: float, path: Path) -> Path:
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
    runs = sorted(ipa, key=lambda r: r.cost_usd)
    ax.plot([r.cost_per_hour for r in runs], [r.accuracy for r in runs], "o-", color="tab:blue",
            label="IPA-like milp (accuracy weight)")
    for r in runs:
        ax.annotate(f"w={r.weight:g}", (r.cost_per_hour, r.accuracy), fontsize="x-small",
                    xytext=(4, -10), textcoords="offset points")
    for r, marker in zip(fixed, ("s", "^")):
        ax.plot([r.cost_per_hour], [r.accuracy], marker, color="tab:red", ms=8, ls="", label=r.label)
    ax.set_xlabel(r"mean cost (\$/h)")
    ax.set_ylabel("pipeline accuracy (mAP x top-1)")
    ax.set_title("accuracy-cost trade-off (Fig. 14)")
    ax.legend(loc="lower right", fontsize="small")
    ax2.bar([r.label for r in runs + list(fixed)], [100 * r.attainment for r in runs + list(fixed)],
            color=["tab:blue"] * len(runs) + ["tab:red"] * len(fixed))
    ax2.set_ylabel("SLO met (%)")
    ax2.set_ylim(min(90.0, min(100 * r.attainment for r in runs + list(fixed)) - 1), 100.5)
    ax2.set_title(f"SLO attainment, SLO {slo_ms:.0f} ms (Fig. 8)")
    ax2.tick_params(axis="x", rotation=60, labelsize="small")
    for a in (ax, ax2):
        a.grid(alpha=0.3)
    return _save(fig, path)
