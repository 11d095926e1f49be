"""The run report: a pure function from results (``InferenceResult`` records) to a frozen :class:`Summary`.

The same function summarises a Kafka replay and a ``slipstream simulate`` run: both give result records
(``slipstream.schemas.records.InferenceResult``); it reads ``status, reason, created_ns, deadline_ns,
finished_ns, hops, accuracy``.

Definitions (docs/loadgen.md repeats them):
- latency = ``finished_ns - created_ns`` of ``done`` results (one producer-timestamp clock); the
  end-to-end percentiles (``Summary.latency``, the CDF, the per-window p50/p99) are over every request
  sent, and a request that did not end ``done`` (dropped, error or missing) counts as infinitely late:
  the estimator's definition (``slipstream.planner.results``), so a p99 within the SLO means 99% answered in
  time. Tables say so with :data:`LATE` in their header. Percentiles are nearest-rank, so infinities
  stay infinite;
- a request *attains* the SLO when it is ``done`` by its ``deadline_ns``; attainment divides by every
  request sent, so drops, errors and missing results count as misses;
- drops are grouped by the reason's text before the first ':' (``deadline: predicted ...`` -> deadline);
- per stage, from the hops: queueing = ``started - enqueued``, service = ``finished - started``,
  residence = ``finished - enqueued``. A hop with ``started_ns = None`` (the estimator knows only how
  long an item stayed at a stage) counts towards residence only.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np

from ..planner.results import LATE, nearest_rank
from ..schemas.records import InferenceResult
from .cost import ConfigEvent, step_values, total_cost_usd
from .schedule import LagStats

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
PERCENTILES = (50.0, 95.0, 99.0, 99.9)
CDF_POINTS = 200
MAX_SERIES_POINTS = 1200


@dataclass(frozen=True)
class LatencyStats:
    count: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    mean_ms: float

    @classmethod
    def of(cls, values_ms: np.ndarray) -> "LatencyStats":
        if len(values_ms) == 0:
            nan = float("nan")
            return cls(0, nan, nan, nan, nan, nan, nan)
        p = [nearest_rank(values_ms, q) for q in PERCENTILES]
        return cls(len(values_ms), *p, float(values_ms.max()), float(values_ms.mean()))


@dataclass(frozen=True)
class StageBreakdown:
    stage: str
    items: int
    residence: LatencyStats  # queue + service
    queue: LatencyStats  # items whose hops split queueing from service
    service: LatencyStats
    mean_batch: float | None
    variants: Mapping[str, int]  # variant -> items it handled


@dataclass(frozen=True)
class Series:
    """Per-window time series; ``t_s`` is each window's start, seconds after the run start."""

    window_s: float
    t_s: tuple[float, ...]
    sent: tuple[int, ...]  # requests created in the window
    p50_ms: tuple[float, ...]  # of the window's requests, not done = inf (nan when none)
    p99_ms: tuple[float, ...]
    attainment: tuple[float, ...]  # of requests created in the window
    cost_per_hour: tuple[float, ...]
    replicas: Mapping[str, tuple[float, ...]]  # stage -> replicas at each window start
    accuracy: tuple[float, ...] = ()  # mean accuracy of the window's requests done (nan when none)


@dataclass(frozen=True)
class Envelope:
    """Max arrival rate over each window size: the live one of this run and the one planned for."""

    windows_s: tuple[float, ...]
    live_qps: tuple[float, ...]
    planned_qps: tuple[float, ...] | None = None
    planned_label: str = "planned"  # "scheduled" when the reference is the replayed trace itself


@dataclass(frozen=True)
class Summary:
    label: str
    pipeline: str
    source: str  # "kafka" or "simulate"
    slo_ms: float
    duration_s: float
    requests: int  # sent (or simulated)
    results: int
    done: int
    dropped: int
    errors: int
    missing: int
    attainment: float
    latency: LatencyStats  # end to end, every request sent; not done = inf (LATE)
    drops_by_reason: Mapping[str, int]
    errors_by_reason: Mapping[str, int]
    mean_accuracy: float | None
    stages: tuple[StageBreakdown, ...]
    cost_total_usd: float
    cost_mean_per_hour: float
    series: Series
    cdf_ms: tuple[float, ...]  # end-to-end quantiles at cdf_q, not done = inf (LATE)
    cdf_q: tuple[float, ...]
    envelope: Envelope | None = None
    lag: LagStats | None = None
    duplicates: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)


def reason_category(reason: str) -> str:
    """``deadline: predicted ...`` -> ``deadline``; the estimator's ``stage X: deadline: ...`` ->
    ``deadline@X``."""
    where = ""
    if reason.startswith("stage ") and ":" in reason:
        head, reason = reason.split(":", 1)
        where = "@" + head[len("stage "):].strip()
    head = reason.split(":", 1)[0].strip()
    return (head or "unspecified") + where


def summarize(results: Sequence[InferenceResult], *, slo_ms: float, pipeline: str = "",
              label: str = "", source: str = "kafka", sent: int | None = None,
              start_ns: int | None = None, end_ns: int | None = None,
              configs: Sequence[ConfigEvent] = (), window_s: float | None = None,
              envelope: Envelope | None = None, lag: LagStats | None = None,
              duplicates: int = 0, notes: Iterable[str] = ()) -> Summary:
    """Summarise one run. ``sent`` defaults to the number of results; ``start_ns``/``end_ns`` default
    to the first creation and the last finish; ``window_s`` defaults to 1 s, widened so a long run
    has at most MAX_SERIES_POINTS windows."""
    n = len(results)
    sent = n if sent is None else sent
    if sent < n:
        raise ValueError(f"{n} results but only {sent} requests sent")
    status = np.array([r.status for r in results], dtype=object)
    created = np.array([r.created_ns for r in results], dtype=np.int64)
    finished = np.array([r.finished_ns for r in results], dtype=np.int64)
    deadline = np.array([r.deadline_ns for r in results], dtype=np.int64)
    is_done = status == "done"
    ok = is_done & (finished <= deadline)
    lat_ms = np.where(is_done, (finished - created) / NS_PER_MS, np.inf)  # not done: infinitely late

    start = int(created.min()) if start_ns is None and n else (start_ns or 0)
    end = int(max(finished.max(), created.max())) if end_ns is None and n else (end_ns or start)
    duration_s = max(end - start, 0) / NS_PER_S
    win = window_s or max(1.0, float(np.ceil(duration_s / MAX_SERIES_POINTS)))

    e2e = np.concatenate([lat_ms, np.full(sent - n, np.inf)])  # missing results are late too
    q = np.linspace(0.0, 1.0, CDF_POINTS)
    cdf = np.quantile(e2e, q, method="inverted_cdf") if len(e2e) else np.array([])  # nearest rank
    accs = [r.accuracy for r, d in zip(results, is_done) if d]
    cost_total = total_cost_usd(configs, start, end)
    return Summary(
        label=label, pipeline=pipeline, source=source, slo_ms=float(slo_ms), duration_s=duration_s,
        requests=sent, results=n, done=int(is_done.sum()), dropped=int((status == "dropped").sum()),
        errors=int((status == "error").sum()), missing=sent - n,
        attainment=float(ok.sum() / sent) if sent else float("nan"),
        latency=LatencyStats.of(e2e),
        drops_by_reason=_reasons(results, "dropped"), errors_by_reason=_reasons(results, "error"),
        mean_accuracy=float(np.mean(accs)) if accs else None,
        stages=_stage_breakdown(results),
        cost_total_usd=cost_total,
        cost_mean_per_hour=cost_total / (duration_s / 3600.0) if duration_s > 0 else 0.0,
        series=_series(created, lat_ms, ok, start, end, win, configs,
                       np.array([r.accuracy if d else np.nan for r, d in zip(results, is_done)], dtype=float)),
        cdf_ms=tuple(float(x) for x in cdf), cdf_q=tuple(float(x) for x in q) if len(cdf) else (),
        envelope=envelope, lag=lag, duplicates=duplicates, notes=tuple(notes),
    )


def _reasons(results: Sequence[InferenceResult], status: str) -> dict[str, int]:
    c = Counter(reason_category(r.reason) for r in results if r.status == status)
    return dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))


def _stage_breakdown(results: Sequence[InferenceResult]) -> tuple[StageBreakdown, ...]:
    residence: dict[str, list[int]] = defaultdict(list)
    queue: dict[str, list[int]] = defaultdict(list)
    service: dict[str, list[int]] = defaultdict(list)
    batch: dict[str, list[int]] = defaultdict(list)
    variants: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        for h in r.hops:
            s = h.stage
            residence[s].append(h.finished_ns - h.enqueued_ns)
            if h.started_ns is not None:
                queue[s].append(h.started_ns - h.enqueued_ns)
                service[s].append(h.finished_ns - h.started_ns)
            if h.batch_size:
                batch[s].append(h.batch_size)
            variants[s][h.variant] += 1

    def stats(values: list[int]) -> LatencyStats:
        return LatencyStats.of(np.array(values, dtype=float) / NS_PER_MS)

    return tuple(
        StageBreakdown(
            stage=s, items=len(residence[s]), residence=stats(residence[s]),
            queue=stats(queue[s]), service=stats(service[s]),
            mean_batch=float(np.mean(batch[s])) if batch[s] else None,
            variants=dict(variants[s].most_common()),
        )
        for s in residence  # dicts keep first-seen order: the pipeline's order for the first request
    )


def _series(created: np.ndarray, lat_ms: np.ndarray, ok: np.ndarray,
            start: int, end: int, window_s: float, configs: Sequence[ConfigEvent],
            accuracy: np.ndarray | None = None) -> Series:
    win_ns = int(window_s * NS_PER_S)
    nwin = max(int(np.ceil((end - start) / win_ns)), 1) if end > start else 1
    idx = np.clip((created - start) // win_ns, 0, nwin - 1)
    sent = np.bincount(idx, minlength=nwin)
    met = np.bincount(idx, weights=ok.astype(float), minlength=nwin)
    p50, p99 = _windowed_quantiles(idx, lat_ms, nwin, (0.50, 0.99))
    t_ns = start + np.arange(nwin, dtype=np.int64) * win_ns
    stages = sorted({e.stage for e in configs})
    with np.errstate(invalid="ignore", divide="ignore"):
        attain = np.where(sent > 0, met / np.maximum(sent, 1), np.nan)
        acc = np.full(nwin, np.nan)
        if accuracy is not None and len(accuracy):
            done = ~np.isnan(accuracy)
            n_done = np.bincount(idx[done], minlength=nwin)
            acc = np.where(n_done > 0, np.bincount(idx[done], weights=accuracy[done], minlength=nwin)
                           / np.maximum(n_done, 1), np.nan)
    return Series(
        window_s=window_s,
        t_s=tuple(float(x) for x in np.arange(nwin) * window_s),
        sent=tuple(int(x) for x in sent),
        p50_ms=tuple(float(x) for x in p50), p99_ms=tuple(float(x) for x in p99),
        attainment=tuple(float(x) for x in attain),
        cost_per_hour=tuple(float(x) for x in step_values(configs, t_ns, "cost_per_hour"))
        if configs else tuple(0.0 for _ in range(nwin)),
        replicas={s: tuple(float(x) for x in step_values(configs, t_ns, "replicas", s)) for s in stages},
        accuracy=tuple(float(x) for x in acc),
    )


def _windowed_quantiles(idx: np.ndarray, values: np.ndarray, nwin: int, qs: Sequence[float]
                        ) -> list[np.ndarray]:
    """Per-window quantiles (nearest rank on the sorted window), vectorised; nan for empty windows."""
    out = [np.full(nwin, np.nan) for _ in qs]
    if len(values) == 0:
        return out
    order = np.lexsort((values, idx))
    v, w = values[order], idx[order]
    counts = np.bincount(w, minlength=nwin)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    has = counts > 0
    for o, q in zip(out, qs):
        pos = starts + np.ceil(q * counts).astype(np.int64) - 1
        o[has] = v[np.clip(pos[has], starts[has], starts[has] + counts[has] - 1)]
    return out


def scale_events(summary: Summary) -> list[tuple[float, str, int, int]]:
    """(time s, stage, replicas before, after) wherever a stage's replica count changes."""
    s = summary.series
    out = []
    for stage, reps in s.replicas.items():
        for i in range(1, len(reps)):
            if reps[i] != reps[i - 1]:
                out.append((float(s.t_s[i]), stage, int(reps[i - 1]), int(reps[i])))
    return sorted(out)
