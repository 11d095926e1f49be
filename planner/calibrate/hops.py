"""A live run's hop timings as the fit reads them: each hop's parts (transit, wait, service), each
batch once with its mean concurrency, the worker's own time per batch (``dispatch_ms``), and the
batch timeouts and StageConfigs in force during the run (from its plan and control records).

Owns :class:`RunHops` (one run to fit) and the per-batch table the fit works on (``_Batches``).
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, NamedTuple, Sequence

import numpy as np

from ...schemas.records import HopTiming, InferenceResult
from ...streams.calibration import key
from ...streams.control_rules import current_records
from ...streams.latency import LatencyCurve


def hop_kind(hop: HopTiming, created_ns: int) -> str:
    if hop.stage == "join":
        return "to_join"
    return "ingress" if hop.enqueued_ns == created_ns else "between"


def components(results: Iterable[InferenceResult]):
    """Each recorded hop as (kind, stage, variant, batch, transit ns, wait ns, service ns); hops from
    before ``received_ns`` was recorded are skipped."""
    for r in results:
        for h in r.hops:
            if not h.received_ns:
                continue
            yield (hop_kind(h, r.created_ns), h.stage, h.variant, h.batch_size, h.received_ns - h.enqueued_ns,
                   h.started_ns - h.received_ns, h.finished_ns - h.started_ns)


def batch_hops(results: Iterable[InferenceResult]):
    """Each stage hop with a receipt time, as (its batch: (worker, started, finished), the hop)."""
    for r in results:
        for h in r.hops:
            if h.stage != "join" and h.received_ns:
                yield (h.worker, h.started_ns, h.finished_ns), h


def batches(results: Iterable[InferenceResult]) -> dict[tuple, tuple[str, str, int]]:
    """Every batch run once: (worker, started, finished) -> (stage, variant, batch size)."""
    return {b: (h.stage, h.variant, h.batch_size) for b, h in batch_hops(results)}


def dispatch_ms(results: Iterable[InferenceResult], timeouts_ms: Mapping[str, float] | None = None) -> np.ndarray:
    """Per batch, the worker's own time before the model started it: ``started`` minus the moment it
    could have started, its last item fetched (``received``) and its replica (``worker``) done with
    the batch before. A batch that may have waited for its stage's batch timeout (``timeouts_ms``:
    stage -> ms; started that long or more after its first item) is left out: that wait is the
    batching policy's, which the estimator computes."""
    runs: dict[tuple, list[int]] = {}
    for b, h in batch_hops(results):
        runs.setdefault((*b, h.stage), []).append(h.received_ns)
    out, last_end = [], {}
    for (w, s, f, stage), recv in sorted(runs.items()):
        timeout_ns = (timeouts_ms or {}).get(stage, 0.0) * 1e6
        if not timeout_ns or s - min(recv) < timeout_ns:
            out.append(max(0, s - max(max(recv), last_end.get(w, 0))) / 1e6)
        last_end[w] = f
    return np.asarray(out, dtype=float)


def timeouts_of(plan: Mapping[str, Any] | None, control: Iterable[tuple[int, Mapping[str, Any]]] = ()
                ) -> dict[str, float]:
    """stage -> the shortest batch timeout in ms it had in a run: its longest in the plan document
    (``Plan.to_dict``) or, if shorter, one a re-plan set (``control``: the run's StageConfig records,
    (timestamp ns, record) as :func:`configs_in_force` gives them).
    A batch that waited that long may have waited for the timeout (:func:`dispatch_ms`); checking
    only the plan's timeout, a re-plan that shortens it (say from 27.4 to 25.1 ms) would make every
    later batch look like 25 ms of the worker's own time."""
    out = {sp["stage"]: max(a["batch_timeout_ms"] for a in sp["assignments"])
           for sp in (plan or {}).get("stages", []) if sp["assignments"]}
    for _at, rec in control:
        if "batch_timeout_ms" in rec and rec.get("stage") in out:
            out[rec["stage"]] = min(out[rec["stage"]], float(rec["batch_timeout_ms"]))
    return out


def configs_in_force(control: Iterable[tuple[int, Mapping[str, Any]]], start_ns: int
                     ) -> list[tuple[int, Mapping[str, Any]]]:
    """The StageConfig records of a control topic (``(timestamp ns, record)``, kept as such) in force
    at some time from ``start_ns`` on: per stage, the newest epoch published by then, and every newer
    epoch after it, in time order (the topic also holds earlier runs' configs; scaling actions carry
    no epoch)."""
    before: dict[str, tuple[int, Mapping[str, Any]]] = {}
    later = []
    for at_ns, rec in current_records(control):
        if "epoch" not in rec:
            continue
        if at_ns <= start_ns:
            before[rec["stage"]] = (at_ns, rec)
        else:
            later.append((at_ns, rec))
    return [*before.values(), *later]


def mean_concurrency(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each interval, the time-average number of intervals (itself included) running during it."""
    t = np.concatenate([starts, ends])
    step = np.concatenate([np.ones_like(starts), -np.ones_like(ends)])
    order = np.lexsort((step, t))  # at a tie, ends (-1) before starts
    t, count = t[order], np.cumsum(step[order])
    area = np.concatenate([[0.0], np.cumsum(count[:-1] * np.diff(t).astype(float))])  # integral up to t[i]

    def integral(x: np.ndarray) -> np.ndarray:
        i = np.searchsorted(t, x, side="right") - 1
        return area[i] + count[i] * (x - t[i])

    width = np.maximum(ends - starts, 1).astype(float)
    return np.maximum((integral(ends) - integral(starts)) / width, 1.0)


class RunHops(NamedTuple):
    """One live run to fit: its results, (stage, variant) -> the hardware that ran it, and stage ->
    its batch timeout in ms (see :func:`dispatch_ms`)."""

    results: list[InferenceResult]
    hardware_of: Mapping[tuple[str, str], str]
    timeouts_ms: Mapping[str, float] | None = None


class _Batches(NamedTuple):
    """Every batch of the runs: its run, start (ns), mean concurrency, key group (-1: no profile),
    measured / profiled ratio and profiled latency (ms); ``keys``: "variant@hardware" -> group."""

    run: np.ndarray
    start: np.ndarray
    k: np.ndarray
    group: np.ndarray
    ratio: np.ndarray
    base_ms: np.ndarray
    size: np.ndarray
    keys: dict[str, int]


def _run_batches(runs: Sequence[RunHops], curves: Mapping[tuple[str, str], LatencyCurve]) -> _Batches:
    keys: dict[str, int] = {}
    cols: list[list] = [[], [], [], [], [], [], []]
    for r, run in enumerate(runs):
        rows = [(w, s, f, *info) for (w, s, f), info in batches(run.results).items()]
        span = np.array([(s, f) for _w, s, f, *_ in rows], dtype=np.int64).reshape(-1, 2)
        k = mean_concurrency(span[:, 0], span[:, 1]) if len(rows) else np.empty(0)
        for (_w, s, f, stage, variant, size), kk in zip(rows, k):
            hw = run.hardware_of.get((stage, variant))
            curve = curves.get((variant, hw)) if hw else None
            group = -1 if curve is None else keys.setdefault(key(variant, hw), len(keys))
            ms = curve.ms(size) if curve is not None else np.nan
            for col, v in zip(cols, (r, s, kk, group, (f - s) / 1e6 / ms, ms, size)):
                col.append(v)
    run_, start, k, group, ratio, base, sizes = cols
    return _Batches(np.array(run_, dtype=int), np.array(start, dtype=np.int64), np.array(k, dtype=float),
                    np.array(group, dtype=int), np.array(ratio, dtype=float), np.array(base, dtype=float),
                    np.array(sizes, dtype=int), keys)
