"""PNG plots of a run, drawn from the :class:`~slipstream.loadgen.report.Summary` alone (matplotlib, Agg backend).

- ``latency.png``  p50/p99 latency per window against the SLO, with SLO attainment per window
  (requests not done count as infinitely late; a window whose p99 is such a request gets a marker
  at the top)
Latency and cost plots mark every scale event (a stage's replicas changing) with a dotted line.
- ``cdf.png``      end-to-end latency CDF of every request (not done = late: the curve ends below
  100 %), SLO marked
- ``cost.png``     replicas per stage and total cost per hour over time
- ``envelope.png`` live arrival envelope (max rate per window size) against the planned one, if given
- ``modes.png``    several runs of one trace (``compare-live``): attainment, accuracy and cost over time
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display on servers; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .report import LATE, Summary, scale_events  # noqa: E402


def _title(summary: Summary, what: str) -> str:
    import textwrap

    name = summary.label or summary.pipeline or "run"
    return "\n".join(textwrap.wrap(f"{what}: {name} ({summary.source})", 90))


def _mark_scale_events(summary: Summary, *axes) -> None:
    events = scale_events(summary)
    for k, (t, stage, a, b) in enumerate(events):
        for ax in axes:
            ax.axvline(t, color="tab:gray", ls=":", lw=1)
        top = axes[0]
        top.annotate(f"{stage} {a}\u2192{b}", (t, 1.0), xycoords=("data", "axes fraction"), rotation=90,
                     fontsize="x-small", va="top", ha="right", color="tab:gray",
                     xytext=(-2 - 9 * (k % 3), -2), textcoords="offset points")


def plot_latency(summary: Summary, path: Path) -> Path:
    s = summary.series
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True, height_ratios=(3, 1))
    t = np.asarray(s.t_s)
    p99 = np.asarray(s.p99_ms)
    ax.plot(t, p99, label=f"p99 ({LATE})", color="tab:red", lw=1.2)
    ax.plot(t, s.p50_ms, label="p50", color="tab:blue", lw=1.0)
    ax.axhline(summary.slo_ms, color="black", ls="--", lw=1, label=f"SLO {summary.slo_ms:g} ms")
    late = np.isposinf(p99)
    if late.any():
        ax.plot(t[late], np.full(late.sum(), ax.get_ylim()[1]), "v", color="tab:red", ms=4, clip_on=False,
                label="p99 is a request not done")
    ax.set_ylabel("latency (ms)")
    ax.set_title(_title(summary, f"latency per {s.window_s:g} s window"))
    ax.legend(loc="upper right")
    ax.grid(alpha=0.3)
    ax2.plot(t, np.asarray(s.attainment) * 100, color="tab:green", lw=1)
    ax2.set_ylabel("SLO met (%)")
    ax2.set_ylim(-5, 105)
    ax2.set_xlabel("time since start (s)")
    ax2.grid(alpha=0.3)
    _mark_scale_events(summary, ax, ax2)
    return _save(fig, path)


def plot_cdf(summary: Summary, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    if summary.cdf_ms:
        ax.plot(summary.cdf_ms, np.asarray(summary.cdf_q) * 100, color="tab:blue")
    ax.axvline(summary.slo_ms, color="black", ls="--", lw=1, label=f"SLO {summary.slo_ms:g} ms")
    ax.set_xlabel(f"end-to-end latency (ms, {LATE})")
    ax.set_ylabel("requests (%)")
    ax.set_title(_title(summary, f"latency CDF, attainment {100 * summary.attainment:.2f}%"))
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_cost(summary: Summary, path: Path) -> Path:
    s = summary.series
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
    t = np.asarray(s.t_s)
    for stage, reps in s.replicas.items():
        ax.step(t, reps, where="post", label=stage)
    ax.set_ylabel("replicas")
    ax.set_title(_title(summary, "replicas and cost"))
    if s.replicas:
        ax.legend(loc="upper right", fontsize="small")
    ax.grid(alpha=0.3)
    ax2.step(t, s.cost_per_hour, where="post", color="tab:purple")
    ax2.set_ylabel(r"\$/hour")
    ax2.set_xlabel("time since start (s)")
    # "\$": matplotlib reads a pair of bare dollars as mathtext
    ax2.set_title(f"total \\${summary.cost_total_usd:.4f}, mean \\${summary.cost_mean_per_hour:.3f}/h",
                  fontsize="small")
    ax2.grid(alpha=0.3)
    _mark_scale_events(summary, ax, ax2)
    return _save(fig, path)


def plot_envelope(summary: Summary, path: Path) -> Path:
    env = summary.envelope
    if env is None:
        raise ValueError("the summary holds no envelope")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(env.windows_s, env.live_qps, marker="o", label="live")
    if env.planned_qps is not None:
        ax.plot(env.windows_s, env.planned_qps, marker="s", ls="--", label=env.planned_label)
    ax.set_xscale("log")
    ax.set_xlabel("window (s)")
    ax.set_ylabel("max arrival rate (qps)")
    ax.set_title(_title(summary, "traffic envelope"))
    ax.legend()
    ax.grid(alpha=0.3, which="both")
    return _save(fig, path)


def write_plots(summary: Summary, out_dir: str | Path) -> list[Path]:
    """Every plot the summary has data for; returns the files written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [plot_latency(summary, out / "latency.png"), plot_cdf(summary, out / "cdf.png"),
             plot_cost(summary, out / "cost.png")]
    if summary.envelope is not None:
        paths.append(plot_envelope(summary, out / "envelope.png"))
    return paths


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_modes(summaries: dict[str, Summary], path: Path, what: str = "") -> Path:
    """Several runs of one trace side by side over time (``compare-live``'s ``modes.png``): SLO
    attainment, mean accuracy of the requests done and cost per hour per window, one line per mode,
    the arrival rate behind the first panel; ``what`` names the trace in the title."""
    import textwrap

    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    ax_a, ax_acc, ax_c = axes
    rate_ax = ax_a.twinx()
    for k, (name, s) in enumerate(summaries.items()):
        ser, color = s.series, f"C{k}"
        t = np.asarray(ser.t_s)
        if k == 0:
            rate_ax.fill_between(t, np.asarray(ser.sent) / ser.window_s, step="post", color="tab:gray", alpha=0.15)
        ax_a.plot(t, np.asarray(ser.attainment) * 100, color=color, lw=1.2,
                  label=f"{name}: {100 * s.attainment:.2f}% met")
        if ser.accuracy:
            acc = "-" if s.mean_accuracy is None else f"{s.mean_accuracy:.3f}"
            ax_acc.plot(t, ser.accuracy, color=color, lw=1.2, label=f"{name}: mean {acc}")
        ax_c.step(t, ser.cost_per_hour, where="post", color=color, lw=1.2,
                  label=f"{name}: mean \\${s.cost_mean_per_hour:.3f}/h")
    rate_ax.set_ylabel("arrivals (req/s, shaded)")
    ax_a.set_zorder(rate_ax.get_zorder() + 1)
    ax_a.patch.set_visible(False)
    ax_a.set_ylabel("SLO met (%)")
    ax_a.set_ylim(-5, 105)
    first = next(iter(summaries.values()))
    ax_a.set_title("\n".join(textwrap.wrap(f"{first.pipeline}, {what or first.label}: SLO {first.slo_ms:g} ms, "
                                            f"{first.series.window_s:g} s windows ({first.source})", 90)))
    ax_acc.set_ylabel("accuracy (served)")
    ax_c.set_ylabel(r"\$/hour")
    ax_c.set_xlabel("time since start (s)")
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="lower left", fontsize="small")
        ax.grid(alpha=0.3)
    return _save(fig, path)


save = _save  # the reproductions' figures (slipstream.loadgen.reproduce) are laid out and saved the same way
