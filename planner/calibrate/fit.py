"""The fit: what the profiles do not say, from live runs' hop timings (read by ``hops``), as one
calibration document (stored by ``slipstream.streams.calibration``; merged with the version before by ``store``;
turned into simulator parameters by ``apply``).

From every hop of every result (``HopTiming``: enqueued, received, started, finished):

- **transit** per kind of hop, ``received - enqueued``: produce, broker, and the consumer's fetch
  wait, as quantiles (an empirical distribution). ``ingress`` is the client's hop into the first
  stage, ``between`` a stage's hop into the next, ``to_join`` a fragment's hop into the join. The hop
  to the results topic is not in a result (its ``finished_ns`` is stamped before), and the measured
  latency leaves it out too, so the estimator does the same;
- **service** per (variant, hardware), ``(finished - started) / l(b)`` against the *uncalibrated*
  profile curve at the hop's batch size: the mean ratio is the ``scale`` the profile store then
  applies (the planner plans, and the workers predict, with the scaled curve), per batch size where
  two sizes or more ran often enough (``by_batch``: the worker's per-item work, e.g. decoding an
  image, weighs more in a small batch: resize ran x1.9 of its profile at batch 1, x1.5 at 4); its spread around the
  scale is the estimator's lognormal ``service_cv``, and the same spread by how long a batch runs
  (``service_cv_by_ms``, :func:`spread_by_duration`): a 4 ms batch varies several times more,
  relatively, than a 100 ms one, so one pooled cv made large batches far too variable. Each variant
  with enough batches also gets its own spread (``cv_by_ms`` in its ``service`` entry, by duration
  where its batches span it), which the estimator draws and predicts that variant with: the spread
  is the code's more than the length's (a Python image resize varied by 0.35-0.6 where an ONNX
  classifier at 20-80 ms varied by 0.05-0.2 in the same runs), and a pooled spread gave an
  unmeasured 80 ms classifier the 0.24 of a 14 ms one, so the estimator over-predicted its drops.
  The scale takes in whatever made batches slower than profiled in that run: cores shared with
  other replicas, the broker and the load generator.

Several runs on the same host fit as one (:func:`fit_runs`; each run with the hardware its plan gave
each variant), so a calibration can cover every variant the modes use.

- **host**: batches of every stage run on the same cores. Each batch's mean concurrency ``k`` over
  its run (how many batches, its own included, ran meanwhile) comes from the hop timings; the fit
  picks the free cores ``F`` for which ``service = scale * l(b) * max(1, k / F)`` explains the
  measured times best (least squares in log), and the estimator then shares ``F`` cores among running
  batches (``HostModel``, processor sharing), so a burst that keeps both stages busy slows them both,
  as it did in the run. The scale is then what is left once sharing is accounted for. ``F`` at the
  machine's core count or more (sharing explains nothing) leaves the host out.

- **dispatch**: per batch, the worker's own time before the model starts it (:func:`dispatch_ms`),
  as quantiles: the estimator adds a draw to every batch's run (``ServiceTime.dispatch``).

Queue and batch formation (``started - received``) are otherwise what the estimator computes.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Mapping, Sequence

import numpy as np

from ...schemas.records import InferenceResult
from ...streams.calibration import batch_scale
from ...streams.latency import LatencyCurve
from ...streams.profile_store import machine_info, now_iso
from ..sim.params import HostModel
from .hops import RunHops, _run_batches, components, dispatch_ms

# every half percent to the 99th, then finer into the tail: a draw interpolates between stored
# quantiles, so the top segment's share must be small (one in 10,000) for a run's one outlier
QUANTILES = np.concatenate([np.linspace(0.0, 99.0, 199), [99.2, 99.4, 99.6, 99.8, 99.9, 99.95, 99.98, 99.99, 100.0]])
SLOWDOWN_WINDOW_S = 1.0
SPREAD_BIN = 40  # batches per bin of the service spread by duration, at least
SCALE_BIN = 30  # batches of one size for a scale of its own


class CalibrationFitError(ValueError):
    """Results that cannot be fitted; the message says what is missing."""


def _quantiles(a: np.ndarray) -> list[float]:
    """Every half percent of ``a`` (empty when ``a`` is)."""
    return [float(x) for x in np.percentile(a, QUANTILES)] if a.size else []


def fit_host(ratio: np.ndarray, k: np.ndarray, group: np.ndarray, cores: float) -> tuple[float, np.ndarray]:
    """Free cores F and per-group scale minimising the squared log error of
    ``ratio = scale[group] * max(1, k / F)`` (``F`` on a 0.05 grid from ``cores`` down; a tie keeps
    the larger F, i.e. less sharing)."""
    best = (np.inf, cores, None)
    logr = np.log(np.maximum(ratio, 1e-9))
    for free in np.arange(cores, 0.25 - 1e-9, -0.05):
        resid = logr - np.log(np.maximum(1.0, k / free))
        scale = np.array([resid[group == g].mean() for g in range(group.max() + 1)])
        err = float(((resid - scale[group]) ** 2).sum())
        if err < best[0] - 1e-9:
            best = (err, float(free), np.exp(scale))
    return best[1], best[2]


def slowdown(starts_ns: np.ndarray, factor: np.ndarray, window_s: float = None) -> tuple[np.ndarray, np.ndarray]:
    """The machine's pace per window (the mean factor of the batches that started in it, weighted so
    the batches' mean stays 1; windows with fewer than 3 batches are left out) and what is left of
    each batch's factor within its window."""
    window_ns = int((window_s or SLOWDOWN_WINDOW_S) * 1e9)
    w = (starts_ns - starts_ns.min()) // window_ns
    ids, inv, counts = np.unique(w, return_inverse=True, return_counts=True)
    means = np.bincount(inv, weights=factor) / counts
    within = factor / means[inv]
    keep = counts >= 3
    pace = means[keep] / np.average(means[keep], weights=counts[keep]) if keep.any() else np.ones(1)
    return pace, within


def run_pace(run: RunHops, curves: Mapping[tuple[str, str], LatencyCurve], host: HostModel | None,
             start_ns: int, window_s: float = SLOWDOWN_WINDOW_S) -> dict[str, tuple[float, ...]]:
    """How slow each variant@hardware ran, window by window from ``start_ns``, in a run that
    happened: the mean of its batches' measured / expected service in each window (shrunk by
    :func:`shrunk_means`), expected being ``curves`` (the calibrated ones the estimator draws around)
    at the batch's size, slowed by ``host``'s core sharing at the batch's measured concurrency. What
    is left is what a calibration cannot know beforehand: what else ran on the machine in that
    second, and how it hit each model (an ONNX classifier's thread loses its core to the broker and
    the load generator in a burst where a Python resize between them does not). For a like-for-like
    replay of that run (``ServiceTime.timelines``)."""
    b = _run_batches([run], curves)
    ok = b.group >= 0
    if not ok.any():
        return {}
    k, g, ratio = b.k[ok], b.group[ok], b.ratio[ok]
    factor = ratio / (np.maximum(1.0, k / host.free_cores) if host is not None else 1.0)
    w = np.maximum((b.start[ok] - start_ns) // int(window_s * 1e9), 0)
    return {name: tuple(round(float(x), 4) for x in shrunk_means(w[g == i], factor[g == i]))
            for name, i in b.keys.items() if (g == i).any()}


def shrunk_means(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Per window ``0..max(w)``, the mean of the values ``x`` in it, shrunk toward the mean of all by
    how little its few values say (empirical Bayes: a window of n values keeps tau2 / (tau2 + v / n)
    of its difference, v the variance within windows, tau2 what the windows' means vary by beyond
    it): three batches with one 100 ms outlier among them are not a slow second. A window without
    values gets the mean of all."""
    n = np.bincount(w).astype(float)
    means = np.bincount(w, weights=x) / np.maximum(n, 1)
    mu = float(x.mean())
    v = float(((x - means[w]) ** 2).sum() / max(len(x) - int((n > 0).sum()), 1))
    seen = n > 0
    tau2 = max(0.0, float(np.average((means[seen] - mu) ** 2, weights=n[seen])) - v * seen.sum() / len(x))
    keep = np.where(seen, tau2 / (tau2 + v / np.maximum(n, 1)) if tau2 > 0 else 0.0, 0.0)
    return mu + (means - mu) * keep


def fit(results: Iterable[InferenceResult], curves: Mapping[tuple[str, str], LatencyCurve],
        hardware_of: Mapping[tuple[str, str], str], source: str = "", cores: float | None = None,
        min_batches: int = 1, timeouts_ms: Mapping[str, float] | None = None) -> dict:
    """The calibration document of one run (:func:`fit_runs`)."""
    return fit_runs([RunHops(list(results), hardware_of, timeouts_ms)], curves, source, cores, min_batches)


def fit_runs(runs: Sequence[RunHops], curves: Mapping[tuple[str, str], LatencyCurve], source: str = "",
             cores: float | None = None, min_batches: int = 1) -> dict:
    """The calibration document of one or more runs on the same host. ``curves``: (variant, hardware)
    -> uncalibrated curve; ``cores``: the host's (default: this machine's); ``min_batches``: fewer
    batches than this is too little to fit."""
    import os

    transit = _transits(runs)
    b = _run_batches(runs, curves)
    if len(b.ratio) < min_batches:
        raise CalibrationFitError(f"{len(b.ratio)} batches ran; a fit needs {min_batches}")
    if not b.keys:
        raise CalibrationFitError(f"no hop's variant has a profile: hops ran "
                                  f"{sorted({k for r in runs for k in r.hardware_of})}, profiles are {sorted(curves)}")
    ok = b.group >= 0
    ratio, k, g, base, size = b.ratio[ok], b.k[ok], b.group[ok], b.base_ms[ok], b.size[ok]
    cores = float(cores or os.cpu_count() or 1)
    # the shared cores with a scale per run and variant: runs differ in pace (what else ran on the
    # machine), which one scale per variant would misread as core sharing
    per_run = np.unique(b.run[ok] * len(b.keys) + g, return_inverse=True)[1]
    free = fit_host(ratio, k, per_run, cores)[0]
    shared = np.maximum(1.0, k / free)
    names = sorted(b.keys, key=b.keys.get)
    service, expected = service_scales(ratio / shared, g, size, names)
    left = ratio / (expected * shared)
    left = left / np.array([left[g == i].mean() for i in range(len(names))])[g]  # mean 1 per variant
    pace, within = [], np.empty_like(left)
    for r in np.unique(b.run[ok]):
        mine = b.run[ok] == r
        p, within[mine] = slowdown(b.start[ok][mine], left[mine])
        pace.extend(p)
    scaled_ms = base * expected
    _own_spreads(service, names, g, scaled_ms, within)
    host = {"cores": cores, "free_cores": free, "mean_concurrency": float(k.mean())} if free < cores else None
    dispatch = np.concatenate([dispatch_ms(r.results, r.timeouts_ms) for r in runs])
    return {"fitted_at": now_iso(), "source": source, "machine": machine_info(), "service": service,
            "service_cv": float(np.std(within)), "service_cv_by_ms": spread_by_duration(scaled_ms, within),
            "host": host, "slowdown": {"window_s": SLOWDOWN_WINDOW_S, "factors": [round(float(x), 4) for x in pace]},
            "quantile_pct": [float(p) for p in QUANTILES],
            "transit_ms": {kd: _quantiles(np.asarray(v)) for kd, v in sorted(transit.items())},
            "dispatch_ms": _quantiles(dispatch),
            "samples": {"hops": sum(len(v) for v in transit.values()), "batches": len(b.ratio),
                        "results": sum(len(r.results) for r in runs), "runs": len(runs)}}


def _transits(runs: Sequence[RunHops]) -> dict[str, list[float]]:
    """Per kind of hop, every hop's transit in ms."""
    transit: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        for kind, _stage, _variant, _batch, t_ns, _w, _s in components(run.results):
            transit[kind].append(max(t_ns, 0) / 1e6)
    if not transit:
        raise CalibrationFitError("no hop carries received_ns: the run was made before hop timings recorded "
                                  "it; run it again with this version")
    return transit


def _own_spreads(service: dict, names: Sequence[str], g: np.ndarray, scaled_ms: np.ndarray,
                 within: np.ndarray) -> None:
    """Each variant with enough batches gets its own spread (``cv_by_ms`` in its ``service`` entry):
    the code it runs sets it, not its length."""
    for i, name in enumerate(names):
        mine = g == i
        if mine.sum() >= SPREAD_BIN:
            service[name]["cv_by_ms"] = spread_by_duration(scaled_ms[mine], within[mine]) or \
                [[float(np.exp(np.log(scaled_ms[mine]).mean())), lognormal_cv(within[mine])]]


def service_scales(r: np.ndarray, g: np.ndarray, size: np.ndarray, names: Sequence[str],
                   min_batches: int = SCALE_BIN) -> tuple[dict, np.ndarray]:
    """Per variant (group ``g``, named ``names``): the mean of its batches' measured / profiled ratios
    ``r`` (core sharing taken out) as its ``scale``, and per batch ``size`` (``by_batch``) where at
    least ``min_batches`` batches of two sizes or more ran; with each batch's own expected scale."""
    service, expected = {}, np.empty_like(r)
    for i, name in enumerate(names):
        mine = g == i
        entry = service[name] = {"scale": float(r[mine].mean()), "samples": int(mine.sum())}
        entry["sizes"] = {str(int(s)): int((mine & (size == s)).sum()) for s in np.unique(size[mine])}
        expected[mine] = entry["scale"]
        sizes = [s for s in np.unique(size[mine]) if (mine & (size == s)).sum() >= min_batches]
        if len(sizes) > 1:
            entry["by_batch"] = {str(int(s)): float(r[mine & (size == s)].mean()) for s in sizes}
            for s in np.unique(size[mine]):
                expected[mine & (size == s)] = batch_scale(entry["by_batch"], int(s))
    return service, expected


def lognormal_cv(factor: np.ndarray) -> float:
    """The coefficient of variation of the lognormal with the spread of ``log(factor)``."""
    return float(np.sqrt(np.expm1(np.var(np.log(np.maximum(factor, 1e-9))))))


def spread_by_duration(ms: np.ndarray, factor: np.ndarray, min_batches: int = SPREAD_BIN) -> list[list[float]]:
    """The service spread by how long batches run: batches in order of their (calibrated) profiled
    latency ``ms``, cut into bins of at least ``min_batches`` that span at least a factor of 2; per
    bin, the geometric mean latency and the lognormal cv of the bin's ``factor`` (from the spread of
    its log). Fewer than two bins: [] (the one pooled cv is all the data says)."""
    order = np.argsort(ms, kind="stable")
    ms, logf = ms[order], np.log(np.maximum(factor[order], 1e-9))
    points, i = [], 0
    while len(ms) - i >= min_batches:
        j = i + min_batches
        while j < len(ms) and ms[j] < 2 * ms[i]:
            j += 1
        if len(ms) - j < min_batches:
            j = len(ms)  # the rest is too small for a bin of its own
        points.append([float(np.exp(np.log(ms[i:j]).mean())), float(np.sqrt(np.expm1(np.var(logf[i:j]))))])
        i = j
    return points if len(points) > 1 else []
