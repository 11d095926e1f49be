"""Calibration: fit what the profiles do not say from a live run's hop timings, and hand it to the
estimator (stored by ``streams.calibration``, read back here as simulator parameters).

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
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

import numpy as np

from planner.sim.params import HostModel, Network, ServiceTime, Transit
from streams.calibration import batch_scale, key
from streams.latency import LatencyCurve
from streams.profile_store import machine_info, now_iso

# every half percent to the 99th, then finer into the tail: a draw interpolates between stored
# quantiles, so the top segment's share must be small (one in 10,000) for a run's one outlier
QUANTILES = np.concatenate([np.linspace(0.0, 99.0, 199), [99.2, 99.4, 99.6, 99.8, 99.9, 99.95, 99.98, 99.99, 100.0]])
HOP_KINDS = ("ingress", "between", "to_join")
MIN_CV = 0.05  # below this the spread is noise: deterministic service
SLOWDOWN_WINDOW_S = 1.0
SPREAD_BIN = 40  # batches per bin of the service spread by duration, at least
SCALE_BIN = 30  # batches of one size for a scale of its own


class CalibrationFitError(ValueError):
    """Results that cannot be fitted; the message says what is missing."""


def hop_kind(hop: Mapping[str, Any], created_ns: int) -> str:
    if hop["stage"] == "join":
        return "to_join"
    return "ingress" if hop["enqueued_ns"] == created_ns else "between"


def components(results: Iterable[Mapping[str, Any]]):
    """Each recorded hop as (kind, stage, variant, batch, transit ns, wait ns, service ns); hops from
    before ``received_ns`` was recorded are skipped."""
    for r in results:
        for h in r.get("hops", ()):
            if not h.get("received_ns"):
                continue
            yield (hop_kind(h, r["created_ns"]), h["stage"], h["variant"], h["batch_size"],
                   h["received_ns"] - h["enqueued_ns"], h["started_ns"] - h["received_ns"],
                   h["finished_ns"] - h["started_ns"])


def batch_hops(results: Iterable[Mapping[str, Any]]):
    """Each stage hop with a receipt time, as (its batch: (worker, started, finished), the hop)."""
    for r in results:
        for h in r.get("hops", ()):
            if h["stage"] != "join" and h.get("received_ns"):
                yield (h["worker"], h["started_ns"], h["finished_ns"]), h


def batches(results: Iterable[Mapping[str, Any]]) -> dict[tuple, tuple[str, str, int]]:
    """Every batch run once: (worker, started, finished) -> (stage, variant, batch size)."""
    return {b: (h["stage"], h["variant"], h["batch_size"]) for b, h in batch_hops(results)}


def dispatch_ms(results: Iterable[Mapping[str, Any]], timeouts_ms: Mapping[str, float] | None = None) -> np.ndarray:
    """Per batch, the worker's own time before the model started it: ``started`` minus the moment it
    could have started, its last item fetched (``received``) and its instance (``worker``) done with
    the batch before. A batch that may have waited for its stage's batch timeout (``timeouts_ms``:
    stage -> ms; started that long or more after its first item) is left out: that wait is the
    batching policy's, which the estimator computes."""
    runs: dict[tuple, list[int]] = {}
    for b, h in batch_hops(results):
        runs.setdefault((*b, h["stage"]), []).append(h["received_ns"])
    out, last_end = [], {}
    for (w, s, f, stage), recv in sorted(runs.items()):
        timeout_ns = (timeouts_ms or {}).get(stage, 0.0) * 1e6
        if not timeout_ns or s - min(recv) < timeout_ns:
            out.append(max(0, s - max(max(recv), last_end.get(w, 0))) / 1e6)
        last_end[w] = f
    return np.asarray(out, dtype=float)


def _quantiles(a: np.ndarray) -> list[float]:
    """Every half percent of ``a`` (empty when ``a`` is)."""
    return [float(x) for x in np.percentile(a, QUANTILES)] if a.size else []


def timeouts_of(plan: Mapping[str, Any] | None, control: Iterable[tuple[int, Mapping[str, Any]]] = ()
                ) -> dict[str, float]:
    """stage -> the shortest batch timeout in ms it had in a run: its longest in the plan document
    (``Plan.to_dict``) or, if shorter, one a re-plan set (``control``: the run's StageConfig records,
    (timestamp ns, record) as :func:`configs_in_force` gives them).
    A batch that waited that long may have waited for the timeout (:func:`dispatch_ms`): a re-plan
    that shortened resize's from 27.4 to 25.1 ms made every batch of its last 13 s look like 25 ms of
    the worker's own time, when the plan's timeout alone was checked."""
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
    from streams.control_rules import current_records

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


class RunHops(NamedTuple):
    """One live run to fit: its results, (stage, variant) -> the hardware that ran it, and stage ->
    its batch timeout in ms (see :func:`dispatch_ms`)."""

    results: list
    hardware_of: Mapping[tuple[str, str], str]
    timeouts_ms: Mapping[str, float] | None = None


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


def fit(results: Iterable[Mapping[str, Any]], curves: Mapping[tuple[str, str], LatencyCurve],
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

    transit: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        for kind, _stage, _variant, _batch, t_ns, _w, _s in components(run.results):
            transit[kind].append(max(t_ns, 0) / 1e6)
    if not transit:
        raise CalibrationFitError("no hop carries received_ns: the run was made before hop timings recorded "
                                  "it; run it again with this version")
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
    for i, name in enumerate(names):  # each variant's own spread: the code it runs sets it, not its length
        mine = g == i
        if mine.sum() >= SPREAD_BIN:
            service[name]["cv_by_ms"] = spread_by_duration(scaled_ms[mine], within[mine]) or \
                [[float(np.exp(np.log(scaled_ms[mine]).mean())), lognormal_cv(within[mine])]]
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


def carried_forward(doc: dict, previous: Mapping[str, Any] | None) -> dict:
    """``doc`` with the service scales of ``previous`` for every variant and hardware ``doc``'s runs
    did not run (marked ``carried_from``: the version, else the source, they came from): a run
    measures what it ran, and the rest keeps what was measured before rather than the bare profile.
    The same per batch size (:func:`merged_sizes`): a run that ran a variant at one size keeps the
    scales measured before at its other sizes, and its spread at lengths it did not run
    (:func:`merged_spread`)."""
    old = (previous or {}).get("service", {})
    origin = f"v{previous['version']}" if previous and "version" in previous else (previous or {}).get("source", "?")
    carried = {k: {**v, "carried_from": v.get("carried_from", origin)}
               for k, v in old.items() if k not in doc["service"]}
    merged = {k: m for k, v in doc["service"].items() if k in old
              and (m := merged_spread(merged_sizes(v, old[k], origin), old[k], origin)) is not v}
    return {**doc, "service": {**doc["service"], **merged, **carried}} if carried or merged else doc


def merged_sizes(new: Mapping[str, Any], old: Mapping[str, Any], origin: str) -> Mapping[str, Any]:
    """A variant's new service entry with the per-size scales (``by_batch``) of its old one at the
    batch sizes the new runs did not measure, rescaled by how the two compare at the sizes both
    measured (the geometric mean of new / old there; the new runs' pace sets the level, the older
    measurement the shape); ``new`` itself when the old entry has no sizes to add. Without this, a
    refit on a run of batches of 1 (the demo's plan) gave resize-260 its batch-1 scale (x1.77) at
    every size, where batches of 2-8 had run x0.86-1.09: the estimator ran a baseline's batches of 8
    at 1.7x their measured time and over-dropped."""
    old_by = old.get("by_batch") or {}
    own = new.get("by_batch") or ({b: new["scale"] for b in new.get("sizes", {})} if len(new.get("sizes", {})) == 1 else {})
    extra = {b: v for b, v in old_by.items() if b not in own}
    if not own or not extra:
        return new
    both = [b for b in own if b in old_by]
    level = float(np.exp(np.mean([np.log(own[b] / old_by[b]) for b in both]))) if both else 1.0
    return {**new, "by_batch": {**{b: v * level for b, v in extra.items()}, **own},
            "by_batch_carried_from": {"from": old.get("carried_from", origin), "sizes": sorted(extra, key=int),
                                      "level": level}}


def merged_spread(new: Mapping[str, Any], old: Mapping[str, Any], origin: str) -> Mapping[str, Any]:
    """A variant's new service entry with the spread points (``cv_by_ms``) of its old one at batch
    lengths more than 2x beyond the new points (a spread bin spans 2x), where the new runs measured
    nothing; ``new`` itself when there are none (or either has no spread of its own)."""
    mine, before = new.get("cv_by_ms") or [], old.get("cv_by_ms") or []
    if not mine or not before:
        return new
    lo, hi = min(p[0] for p in mine), max(p[0] for p in mine)
    extra = [p for p in before if p[0] > 2 * hi or p[0] < lo / 2]
    if not extra:
        return new
    return {**new, "cv_by_ms": sorted([*mine, *extra]),
            "cv_carried_from": {"from": old.get("carried_from", origin), "ms": [p[0] for p in extra]}}


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


def host_model(doc: Mapping[str, Any] | None) -> HostModel | None:
    """The cores the calibrated run's batches shared (None: sharing explained nothing)."""
    h = doc.get("host") if doc else None
    return HostModel(h["cores"], h["cores"] - h["free_cores"]) if h else None


def network(doc: Mapping[str, Any] | None) -> Network | None:
    """The estimator's Kafka transits from a calibration (a kind not measured, e.g. no join in the
    pipeline, takes ``between``'s; the results hop takes none, see the module docstring)."""
    if not doc or not doc.get("transit_ms"):
        return None
    q = doc["transit_ms"]
    base = q.get("between") or q.get("ingress") or next(iter(q.values()))
    ingress, between, to_join = (quantiles(doc, q.get(kind, base)) for kind in ("ingress", "between", "to_join"))
    return Network(ingress, between, to_join, Transit.constant(0.0))


def quantiles(doc: Mapping[str, Any], values: Sequence[float]) -> Transit:
    """A calibration's stored quantiles as a distribution (older calibrations stored every half percent
    without saying so)."""
    return Transit.quantiles(values, doc.get("quantile_pct"))


def _at(doc: Mapping[str, Any], values: Sequence[float], pct: float) -> float:
    return float(np.interp(pct, doc.get("quantile_pct") or np.linspace(0.0, 100.0, len(values)), values))


def service_time(doc: Mapping[str, Any] | None) -> ServiceTime:
    """The service spread of a calibration: within a second (lognormal ``service_cv``, by batch
    duration where it was measured: ``service_cv_by_ms``), from second to second (``slowdown``), and
    the worker's own time per batch (``dispatch_ms``); older calibrations lack the last two."""
    cv = float(doc.get("service_cv", 0.0)) if doc else 0.0
    slow = (doc or {}).get("slowdown") or {}
    pace = tuple(slow.get("factors", ()))
    pace = pace if len(pace) > 1 and np.std(pace) >= MIN_CV else ()
    kind, cv = ("lognormal", cv) if cv >= MIN_CV else ("deterministic", 0.0)
    dispatch = (doc or {}).get("dispatch_ms")
    by_ms = tuple((float(ms), max(float(c), MIN_CV)) for ms, c in (doc or {}).get("service_cv_by_ms") or ())
    own = tuple((k, tuple((float(ms), max(float(c), MIN_CV)) for ms, c in v["cv_by_ms"]))
                for k, v in sorted(((doc or {}).get("service") or {}).items()) if v.get("cv_by_ms"))
    lognormal = kind == "lognormal"
    return ServiceTime(kind, cv, pace, float(slow.get("window_s", SLOWDOWN_WINDOW_S)),
                       quantiles(doc, dispatch) if dispatch else Transit(), by_ms if lognormal else (),
                       own if lognormal else ())


def summary_lines(doc: Mapping[str, Any]) -> list[str]:
    """A person's view of a calibration."""
    runs = doc["samples"].get("runs", 1)
    lines = [f"calibration v{doc.get('version', '?')} from {doc.get('source') or '?'} "
             f"({doc['samples']['hops']} hops of {doc['samples']['results']} results"
             f"{f' of {runs} runs' if runs > 1 else ''})"]
    h = doc.get("host")
    lines.append(f"  host: batches share {h['free_cores']:.2f} of {h['cores']:.0f} cores (mean concurrency "
                 f"{h['mean_concurrency']:.2f})" if h else "  host: core sharing explains nothing; left out")
    for k, v in doc["service"].items():
        came = f"carried from {v['carried_from']}" if "carried_from" in v else f"{v['samples']} batches"
        lines.append(f"  service {k:<24} x{v['scale']:.2f} of the profile ({came})")
        if v.get("cv_by_ms"):
            lines.append("    its spread (cv)              " + "  ".join(f"{ms:.0f} ms: {c:.2f}" for ms, c in v["cv_by_ms"]))
        if v.get("by_batch"):
            lines.append("    by batch size                " + "  ".join(f"{b}: x{s:.2f}" for b, s in
                                                                     sorted(v["by_batch"].items(), key=lambda x: int(x[0]))))
    lines.append(f"  service spread (cv)            {doc['service_cv']:.2f} within a second")
    if doc.get("service_cv_by_ms"):
        lines.append("    by batch duration             " + "  ".join(f"{ms:.0f} ms: {c:.2f}"
                                                                    for ms, c in doc["service_cv_by_ms"]))
    pace = (doc.get("slowdown") or {}).get("factors") or [1.0]
    lines.append(f"  pace from second to second     p10 {np.percentile(pace, 10):.2f}  p90 "
                 f"{np.percentile(pace, 90):.2f}  max {max(pace):.2f} ({len(pace)} seconds)")
    for kind, q in doc["transit_ms"].items():
        lines.append(f"  transit {kind:<10} p50 {_at(doc, q, 50):6.1f} ms  p99 {_at(doc, q, 99):6.1f} ms  "
                     f"max {q[-1]:6.1f} ms")
    if doc.get("dispatch_ms"):
        q = doc["dispatch_ms"]
        lines.append(f"  worker's own time per batch    p50 {_at(doc, q, 50):6.1f} ms  p99 {_at(doc, q, 99):6.1f} ms  "
                     f"max {q[-1]:6.1f} ms")
    return lines


def _scaled(curve: LatencyCurve, factor) -> LatencyCurve:
    """``curve`` with each point times ``factor(batch size)``."""
    f = {b: factor(b) for b in curve.points_ms}
    return curve if all(x == 1.0 for x in f.values()) else LatencyCurve.fit({b: v * f[b] for b, v in curve.points_ms.items()})


def recalibrated(problem, new: Mapping[str, Any], old: Mapping[str, Any] | None):
    """``problem``, whose curves are scaled by calibration ``old`` (None: as profiled), planned with
    ``new`` instead: its service scales, network, service spread and host."""
    from dataclasses import replace

    from streams.calibration import service_scale

    stages = tuple(replace(st, variants=tuple(
        replace(v, latency={hw: _scaled(c, lambda b, v=v, hw=hw: service_scale(new, v.name, hw, b)
                                        / service_scale(old, v.name, hw, b))
                            for hw, c in v.latency.items()}) for v in st.variants)) for st in problem.stages)
    return replace(problem, stages=stages, network=network(new) or problem.network, service=service_time(new),
                   host=host_model(new))


def profiled_curves(problem, calibration: Mapping[str, Any] | None) -> dict[tuple[str, str], LatencyCurve]:
    """(variant, hardware) -> the curve as profiled, from a problem scaled by ``calibration``."""
    from streams.calibration import service_scale

    return {(v.name, hw): _scaled(c, lambda b, v=v, hw=hw: 1.0 / service_scale(calibration, v.name, hw, b))
            for st in problem.stages for v in st.variants for hw, c in v.latency.items()}
