"""Goodput past capacity: the offered rate swept from below to well past the knee, live on the broker.

Clockwork and its successors show one figure for overload: goodput (requests answered within the
SLO, per second) against offered load. A system that holds its goodput past the knee refuses the
excess fast; one that collapses spends its CPU on requests that expire anyway. Each point here is a
live run (``slipstream.loadgen.live.run.live_run``: plan from the trace's first ``plan_s`` seconds, the planned
workers, an open-loop replay to the input topic, or through a gateway process, where the excess is
answered 429) at ``factor x knee`` requests/s, Poisson arrivals, or a
step from half the knee to that rate. Every run reports what the processes on the host spent
(``slipstream.loadgen.cpu``): the load generator shares the host with the pipeline.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..live.run import LiveOptions, live_run


@dataclass(frozen=True)
class GoodputRow:
    mode: str
    path: str  # kafka (the load generator produces to the input topic) or gateway (HTTP)
    arrivals: str  # the trace spec
    offered_qps: float
    sent: int
    in_slo: int
    duration_s: float
    attainment: float
    accuracy: float | None
    drops: dict  # reason -> count
    cpu_s: dict  # kind of process -> CPU seconds during the replay
    send_lag_p99_ms: float | None = None  # the load generator's p99 lag behind its schedule

    @property
    def goodput_qps(self) -> float:
        return self.in_slo / self.duration_s

    def cpu_ms_per_request(self, kind: str) -> float:
        return self.cpu_s.get(kind, 0.0) / max(self.sent, 1) * 1e3


def trace_for(arrivals: str, qps: float, knee_qps: float, duration_s: float) -> str:
    if arrivals == "poisson":
        return f"poisson:rate={qps:g},duration={duration_s:g}"
    at = duration_s / 3
    return f"step:rates={knee_qps / 2:g}/{qps:g},at={at:g},cv2=1,transition=2,duration={duration_s:g}"


def sweep(pipe, pipeline_file: str, store, *, knee_qps: float, factors: Sequence[float], modes: Sequence[str],
          paths: Sequence[str] = ("kafka",), arrivals: str = "poisson", duration_s: float = 60.0, plan_s: float = 20.0, seed: int = 0,
          report_dir: Path = Path("reports/goodput"), opts: LiveOptions = LiveOptions(),
          progress: Callable[[str], None] = print) -> list[GoodputRow]:
    """One live run per (factor, path, mode), modes named as compare-live names them (``milp+tuner``)."""
    from dataclasses import replace

    from ..traces import trace_arrivals

    rows = []
    for f in factors:
        spec = trace_for(arrivals, f * knee_qps, knee_qps, duration_s)
        trace = trace_arrivals(spec, seed)
        for path in paths:
            for name in modes:
                mode, _, tuner = name.partition("+")
                o = replace(opts, mode=mode, tune=bool(tuner), replan_s=opts.replan_s if tuner else 0.0,
                            seed=seed, sample_cpu=True, via_gateway=path == "gateway")
                progress(f"== {name} via {path} at {f:g}x the knee: {spec}")
                run = live_run(pipe, pipeline_file, trace, trace[trace < plan_s], store,
                               report_dir / f"{name}-{path}-{arrivals}-{f:g}x", o, f"{pipe.name} {name} {path} {spec}")
                s = run.summary
                rows.append(GoodputRow(name, path, spec, f * knee_qps, s.requests,
                                       int(round(s.attainment * s.requests)), duration_s, s.attainment,
                                       s.mean_accuracy, dict(s.drops_by_reason), run.cpu_s or {},
                                       s.lag.p99_ms if s.lag is not None else None))
                progress(format_rows(rows[-1:]))
    return rows


def format_rows(rows: Sequence[GoodputRow]) -> str:
    kinds = sorted({k for r in rows for k in r.cpu_s})
    lines = [f"{'mode':<16}{'path':<8}{'offered':>8}{'sent':>7}{'goodput':>9}{'SLO met':>9}{'accuracy':>9}"
             f"{'send lag p99':>14}  "
             + "".join(f"{k[:22]:>24}" for k in kinds) + "   drops by reason"]
    for r in rows:
        acc = f"{r.accuracy:.3f}" if r.accuracy is not None else "-"
        lag = f"{r.send_lag_p99_ms:.1f} ms" if r.send_lag_p99_ms is not None else "-"
        cpu = "".join(f"{r.cpu_s.get(k, 0.0):>9.1f} s {r.cpu_ms_per_request(k):>6.2f} ms/r" for k in kinds)
        drops = ", ".join(f"{k} {v}" for k, v in sorted(r.drops.items())) or "-"
        lines.append(f"{r.mode:<16}{r.path:<8}{r.offered_qps:>8.1f}{r.sent:>7}{r.goodput_qps:>9.1f}{r.attainment:>8.2%}"
                     f"{acc:>9}{lag:>14}  {cpu}   {drops}")
    return "\n".join(lines)


def plot(rows: Sequence[GoodputRow], path: Path) -> Path:
    """Goodput, attainment and mean accuracy against offered load, one line per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for mode, via in dict.fromkeys((r.mode, r.path) for r in rows):
        mine = sorted((r for r in rows if (r.mode, r.path) == (mode, via)), key=lambda r: r.offered_qps)
        label = f"{mode} ({via})"
        x = np.array([r.offered_qps for r in mine])
        axes[0].plot(x, [r.goodput_qps for r in mine], "o-", label=label)
        axes[1].plot(x, [100 * r.attainment for r in mine], "o-", label=label)
        axes[2].plot(x, [r.accuracy if r.accuracy is not None else np.nan for r in mine], "o-", label=label)
    top = max(r.offered_qps for r in rows)
    axes[0].plot([0, top], [0, top], ":", color="grey", label="offered")
    for ax, title in zip(axes, ("goodput (answered within SLO, req/s)", "SLO attainment (%)", "mean accuracy")):
        ax.set_xlabel("offered load (req/s)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
