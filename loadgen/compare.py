"""Planner modes side by side on one trace: cost and SLO attainment, with cost relative to cg-peak.

``compare_runs`` takes the mode specs (``MODE`` or ``MODE+tuner``) and a runner that produces each
mode's :class:`~loadgen.report.Summary` (the CLI's simulated run). A mode that does not apply (the
runner raises :class:`ModeNotApplicable`, e.g. no feasible plan) becomes an "unavailable" row; any
other exception is a failure: its row says FAILED with the reason, the other modes still run, and the
commands exit non-zero (:func:`failures`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

from loadgen.report import LATE, Summary

BASELINE = "cg-peak"
P99_HEAD = f"p99 ms ({LATE})"


class ModeNotApplicable(Exception):
    """This planner mode does not apply to this problem (e.g. it finds no feasible plan): a row, not a
    failure."""


@dataclass(frozen=True)
class ComparisonRow:
    spec: str
    mode: str
    tuned: bool
    cost_total_usd: float = math.nan
    cost_mean_per_hour: float = math.nan
    attainment: float = math.nan
    p99_ms: float = math.nan
    mean_accuracy: float = math.nan
    dropped: int = 0
    requests: int = 0
    cost_vs_baseline: float = math.nan  # cost / cg-peak cost
    predicted_p99_ms: float = math.nan  # real runs: the estimator on the run's own arrivals and scale events
    error: str = ""
    failed: bool = False  # the error is a failure, not ModeNotApplicable

    def to_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in self.__dict__.items()}


def parse_mode(spec: str) -> tuple[str, bool]:
    mode, plus, extra = spec.partition("+")
    if plus and extra != "tuner":
        raise ValueError(f"mode spec {spec!r}: expected MODE or MODE+tuner")
    return mode, bool(plus)


def compare_runs(specs: Sequence[str], runner: Callable[[str, bool], Summary | tuple[Summary, float]]
                 ) -> list[ComparisonRow]:
    """``runner(mode, tuned)`` returns the run's Summary, or (Summary, predicted p99 ms) for real runs."""
    rows = []
    for spec in specs:
        mode, tuned = parse_mode(spec)
        try:
            out = runner(mode, tuned)
        except ModeNotApplicable as exc:
            rows.append(ComparisonRow(spec, mode, tuned, error=str(exc) or "does not apply"))
            continue
        except Exception as exc:  # noqa: BLE001 - one mode failing must not hide the others
            rows.append(ComparisonRow(spec, mode, tuned, error=f"{type(exc).__name__}: {exc}", failed=True))
            continue
        s, predicted = out if isinstance(out, tuple) else (out, None)
        acc = math.nan if s.mean_accuracy is None else s.mean_accuracy
        rows.append(ComparisonRow(spec, mode, tuned, s.cost_total_usd, s.cost_mean_per_hour, s.attainment,
                                  s.latency.p99_ms, acc, s.dropped, s.requests,
                                  predicted_p99_ms=math.nan if predicted is None else float(predicted)))
    base = next((r for r in rows if r.mode == BASELINE and not r.error), None)
    if base is not None and base.cost_total_usd > 0:
        rows = [r if r.error else _with_ratio(r, r.cost_total_usd / base.cost_total_usd) for r in rows]
    return rows


def failures(rows: Sequence[ComparisonRow]) -> str:
    """The failed modes and why, one per line ('' when none failed)."""
    return "\n".join(f"{r.spec}: {r.error}" for r in rows if r.failed)


def _with_ratio(row: ComparisonRow, ratio: float) -> ComparisonRow:
    from dataclasses import replace

    return replace(row, cost_vs_baseline=ratio)


def format_comparison(rows: Sequence[ComparisonRow]) -> str:
    head = (f"{'mode':<18}{'$ total':>10}{'$/h':>9}{'vs cg-peak':>11}{'SLO met':>9}{P99_HEAD:>22}"
            f"{'accuracy':>9}{'dropped':>9}")
    predicted = any(not math.isnan(r.predicted_p99_ms) for r in rows)
    if predicted:
        head += f"{'est. p99':>10}{'est/meas':>9}"
    lines = [head]
    for r in rows:
        if r.error:
            lines.append(f"{r.spec:<18}{'FAILED' if r.failed else 'unavailable'}: {r.error}")
            continue
        ratio = "-" if math.isnan(r.cost_vs_baseline) else f"{r.cost_vs_baseline:.2f}x"
        p99 = "-" if math.isnan(r.p99_ms) else f"{r.p99_ms:.1f}"
        acc = "-" if math.isnan(r.mean_accuracy) else f"{r.mean_accuracy:.4f}"
        line = (f"{r.spec:<18}{r.cost_total_usd:>10.4f}{r.cost_mean_per_hour:>9.3f}{ratio:>11}"
                f"{100 * r.attainment:>8.2f}%{p99:>22}{acc:>9}{r.dropped:>9}")
        if predicted:
            est = r.predicted_p99_ms
            ratio = est / r.p99_ms if r.p99_ms > 0 and math.isfinite(r.p99_ms) else math.nan
            line += f"{'-' if math.isnan(est) else f'{est:.1f}':>10}{'-' if math.isnan(ratio) else f'{ratio:.2f}':>9}"
        lines.append(line)
    return "\n".join(lines)
