"""Planner modes side by side on one trace: cost and SLO attainment, with cost relative to cg-peak.

``compare_runs`` takes the mode specs (``MODE`` or ``MODE+tuner``) and a runner that produces each
mode's :class:`~slipstream.loadgen.report.Summary` (the CLI's simulated run). A mode that does not apply (the
runner raises :class:`ModeNotApplicable`, e.g. no feasible plan) becomes an "unavailable" row; any
other exception is a failure: its row says FAILED with the reason, the other modes still run, and the
commands exit non-zero (:func:`failures`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..streams.calibration import pace_note
from .report import LATE, Summary

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
    predicted_attainment: float = math.nan
    predicted_seeds_ms: tuple[float, ...] = ()  # its p99 with each seed (the median is predicted_p99_ms)
    drawn_p99_ms: float = math.nan  # the same with the machine's pace drawn from the calibration, not the run's
    forward_p99_ms: float = math.nan  # the forward prediction: the plan, the tuner policy on the arrivals that
    forward_attainment: float = math.nan  # came, no re-plan, pace drawn (slipstream.loadgen.replay_estimate.forward_estimate)
    forward_shed: float = math.nan  # the share its source gate shed (slipstream.planner.sim.gate)
    unmeasured_pace: tuple[str, ...] = ()  # its variants whose drawn pace the calibration did not measure
    error: str = ""
    failed: bool = False  # the error is a failure, not ModeNotApplicable

    def to_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in self.__dict__.items()}


def parse_mode(spec: str) -> tuple[str, bool]:
    mode, plus, extra = spec.partition("+")
    if plus and extra != "tuner":
        raise ValueError(f"mode spec {spec!r}: expected MODE or MODE+tuner")
    return mode, bool(plus)


def compare_runs(specs: Sequence[str], runner: Callable[[str, bool], Summary | tuple[Summary, Any]]
                 ) -> list[ComparisonRow]:
    """``runner(mode, tuned)`` returns the run's Summary, or for real runs (Summary, the estimator on
    that run: ``slipstream.loadgen.replay_estimate.LikeForLike``)."""
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
        s, est = out if isinstance(out, tuple) else (out, None)
        acc = math.nan if s.mean_accuracy is None else s.mean_accuracy
        predicted = {} if est is None else dict(predicted_p99_ms=est.estimated_p99_ms, predicted_seeds_ms=est.seed_p99_ms,
                                                predicted_attainment=est.estimated_attainment,
                                                drawn_p99_ms=est.drawn_p99_ms,
                                                forward_p99_ms=est.forward_p99_ms,
                                                forward_attainment=est.forward_attainment,
                                                forward_shed=est.forward_shed,
                                                unmeasured_pace=est.unmeasured_pace)
        rows.append(ComparisonRow(spec, mode, tuned, s.cost_total_usd, s.cost_mean_per_hour, s.attainment,
                                  s.latency.p99_ms, acc, s.dropped, s.requests, **predicted))
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
        head += (f"{'est. p99':>10}{'est/meas':>9}{'seeds ms':>16}{'est. SLO':>10}{'drawn p99':>10}{'drawn/meas':>11}"
                 f"{'fwd p99':>10}{'fwd/meas':>9}{'fwd SLO':>9}{'fwd shed':>9}")
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
            seeds = f"{min(r.predicted_seeds_ms):.0f}-{max(r.predicted_seeds_ms):.0f}" if r.predicted_seeds_ms else "-"
            att = "-" if math.isnan(r.predicted_attainment) else f"{100 * r.predicted_attainment:.2f}%"
            drawn = "-" if math.isnan(r.drawn_p99_ms) else f"{r.drawn_p99_ms:.1f}"
            line += (f"{'-' if math.isnan(est) else f'{est:.1f}':>10}{est_ratio(est, r.p99_ms):>9}{seeds:>16}{att:>10}"
                     f"{drawn:>10}{est_ratio(r.drawn_p99_ms, r.p99_ms):>11}")
            fwd = "-" if math.isnan(r.forward_p99_ms) else f"{r.forward_p99_ms:.1f}"
            fatt = "-" if math.isnan(r.forward_attainment) else f"{100 * r.forward_attainment:.2f}%"
            fshed = "-" if math.isnan(r.forward_shed) else f"{100 * r.forward_shed:.1f}%"
            line += f"{fwd:>10}{est_ratio(r.forward_p99_ms, r.p99_ms):>9}{fatt:>9}{fshed:>9}"
        lines.append(line)
    lines += [f"{r.spec}: {pace_note(r.unmeasured_pace)}" for r in rows if r.unmeasured_pace and not r.error]
    return "\n".join(lines)


def est_ratio(est: float, measured: float) -> str:
    """estimated / measured p99 as printed: ``inf=inf`` when both are past the SLO's reach (more than
    1 % dropped or late beyond measure on both sides), ``meas=inf`` when only the run is, ``-`` when
    one side is missing."""
    if math.isnan(est) or math.isnan(measured) or measured <= 0:
        return "-"
    if math.isinf(est) and math.isinf(measured):
        return "inf=inf"
    if math.isinf(measured):
        return "meas=inf"  # the run lost more than 1 %, the estimate did not
    return "inf" if math.isinf(est) else f"{est / measured:.2f}"
