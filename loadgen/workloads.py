"""Arrival processes and shape-preserving rescaling: pure numpy functions of (parameters, seeded rng).

Every function returns (or takes) a sorted float64 array of arrival times in seconds from 0, and every
random choice comes from the ``numpy.random.Generator`` passed in, so a seed fixes a trace.

- the stationary generators (gamma, Poisson), the rate curve and the peak rates are
  ``slipstream.streams.arrivals`` (the planner uses them too).
- :func:`varying_arrivals` — a gamma process whose rate and CV^2 move between phases, each change
  spread over a transition time along a sigmoid or a line (InferLine's time-varying workloads).
- :func:`counts_to_arrivals` — per-bin request counts (a per-second or per-minute trace) spread into
  arrival times inside each bin: ``uniform`` (exact counts), ``poisson`` (Poisson count with that mean)
  or ``even`` (evenly spaced, no randomness).
- :func:`scale_rate`, :func:`rescale_to_peak`, :func:`compress`, :func:`time_slice` — rescaling that keeps
  the shape of the rate curve (see each docstring for what "keeps" means).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..streams.arrivals import check_positive, peak_rate_binned

SPREADS = ("uniform", "poisson", "even")
SHAPES = ("sigmoid", "linear")
# sigmoid transitions run the logistic over [-K/2, K/2]: it covers 1%..99% of the change before the
# end-point normalisation, so the middle of the transition carries most of it, like InferLine's.
_SIGMOID_SPAN = 2.0 * np.log(99.0)


@dataclass(frozen=True)
class Phase:
    """One level of a time-varying process; it starts changing towards the next phase at ``until_s``."""

    rate_qps: float
    cv2: float = 1.0
    until_s: float = float("inf")


def transition_weight(u: np.ndarray | float, shape: str) -> np.ndarray:
    """Share of a change done at fraction ``u`` (clipped to [0, 1]) of the transition: 0 -> 0, 1 -> 1."""
    u = np.clip(np.asarray(u, dtype=float), 0.0, 1.0)
    if shape == "linear":
        return u
    if shape == "sigmoid":
        s = lambda x: 1.0 / (1.0 + np.exp(-_SIGMOID_SPAN * (x - 0.5)))  # noqa: E731
        return (s(u) - s(0.0)) / (s(1.0) - s(0.0))
    raise ValueError(f"transition shape must be one of {SHAPES}, got {shape!r}")


def phase_profile(phases: Sequence[Phase], transition_s: float, shape: str, t: np.ndarray | float
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(rate, cv2) at times ``t``: phase i holds until ``phases[i].until_s``, then moves to phase i+1
    over ``transition_s`` seconds (a step when 0). CV^2 moves along the same curve as the rate."""
    t = np.asarray(t, dtype=float)
    rate = np.full(t.shape, phases[0].rate_qps, dtype=float)
    cv2 = np.full(t.shape, phases[0].cv2, dtype=float)
    for prev, nxt in zip(phases, phases[1:]):
        if transition_s > 0:
            w = transition_weight((t - prev.until_s) / transition_s, shape)
        else:
            w = (t >= prev.until_s).astype(float)
        rate = rate + w * (nxt.rate_qps - prev.rate_qps)
        cv2 = cv2 + w * (nxt.cv2 - prev.cv2)
    return rate, cv2


def varying_arrivals(phases: Sequence[Phase], duration_s: float, rng: np.random.Generator, *,
                     transition_s: float = 0.0, shape: str = "sigmoid") -> np.ndarray:
    """A gamma process whose (rate, CV^2) follow :func:`phase_profile`.

    Each inter-arrival gap is drawn from the gamma at the current time (a renewal approximation of a
    non-stationary process, as InferLine's generator does); a phase with rate 0 is not allowed.
    """
    if not phases:
        raise ValueError("a time-varying process needs at least one phase")
    for i, p in enumerate(phases):
        check_positive(f"phases[{i}].rate", p.rate_qps)
        check_positive(f"phases[{i}].cv2", p.cv2)
    ends = [p.until_s for p in phases[:-1]]
    if any(b <= a for a, b in zip(ends, ends[1:])):
        raise ValueError(f"phase change times must increase, got {ends}")
    if transition_s < 0:
        raise ValueError(f"transition must be >= 0 s, got {transition_s}")
    check_positive("duration", duration_s)
    times: list[float] = []
    t = 0.0
    while t < duration_s:
        r, c = _profile_at(phases, transition_s, shape, t)
        t += float(rng.gamma(1.0 / c, c / r))
        if t < duration_s:
            times.append(t)
    return np.asarray(times, dtype=float)


def _profile_at(phases: Sequence[Phase], transition_s: float, shape: str, t: float) -> tuple[float, float]:
    """Scalar :func:`phase_profile` for the per-arrival loop (numpy per call would be 10x slower)."""
    rate, cv2 = phases[0].rate_qps, phases[0].cv2
    for prev, nxt in zip(phases, phases[1:]):
        if t < prev.until_s:
            break
        if transition_s > 0 and t < prev.until_s + transition_s:
            w = float(transition_weight((t - prev.until_s) / transition_s, shape))
        else:
            w = 1.0
        rate += w * (nxt.rate_qps - prev.rate_qps)
        cv2 += w * (nxt.cv2 - prev.cv2)
    return rate, cv2


def counts_to_arrivals(counts: Sequence[float] | np.ndarray, bin_s: float, rng: np.random.Generator, *,
                       spread: str = "uniform") -> np.ndarray:
    """Per-bin request counts -> arrival times, bin ``i`` covering ``[i*bin_s, (i+1)*bin_s)``.

    Fractional counts (after rescaling) are rounded stochastically for ``uniform`` and ``even``,
    so the expected total is kept.
    """
    check_positive("bin", bin_s)
    c = np.asarray(counts, dtype=float)
    if c.ndim != 1 or np.any(c < 0) or not np.all(np.isfinite(c)):
        raise ValueError("counts must be a 1-D array of non-negative finite numbers")
    if spread == "poisson":
        n = rng.poisson(c)
    elif spread in ("uniform", "even"):
        base = np.floor(c)
        n = (base + (rng.random(c.shape) < (c - base))).astype(np.int64)
    else:
        raise ValueError(f"spread must be one of {SPREADS}, got {spread!r}")
    n = n.astype(np.int64)
    starts = np.repeat(np.arange(len(c), dtype=float) * bin_s, n)
    if spread == "even":
        # k-th of n in a bin sits at (k + 0.5)/n of the bin
        first = np.repeat(np.cumsum(n) - n, n)
        k = np.arange(int(n.sum())) - first
        offs = (k + 0.5) / np.repeat(n, n) * bin_s
        return starts + offs
    return np.sort(starts + rng.random(int(n.sum())) * bin_s)


def scale_rate(arrivals_s: np.ndarray, factor: float, rng: np.random.Generator) -> np.ndarray:
    """Multiply the rate by ``factor`` while keeping the timeline (same duration, same rate curve shape).

    ``factor <= 1`` keeps each arrival with probability ``factor`` (independent thinning).
    ``factor > 1`` keeps every arrival and adds ``floor(factor-1)`` copies plus one more with probability
    ``frac(factor)``; each copy lands uniformly between its arrival and the next one, so order holds and
    the per-second rate is multiplied by ``factor`` in expectation.
    """
    check_positive("rate scale", factor)
    a = np.asarray(arrivals_s, dtype=float)
    if factor == 1.0 or len(a) == 0:
        return a.copy()
    if factor < 1.0:
        return a[rng.random(len(a)) < factor]
    extra = factor - 1.0
    copies = np.floor(extra).astype(np.int64) + (rng.random(len(a)) < (extra - np.floor(extra)))
    gaps = np.diff(a, append=a[-1])  # the last arrival's copies stay on it
    src = np.repeat(np.arange(len(a)), copies)
    added = a[src] + rng.random(len(src)) * gaps[src]
    return np.sort(np.concatenate([a, added]), kind="stable")


def rescale_to_peak(arrivals_s: np.ndarray, target_qps: float, rng: np.random.Generator, *,
                    window_s: float = 1.0) -> np.ndarray:
    """Scale the rate so the peak ``window_s`` rate becomes ``target_qps`` (approximately: the thinning
    or copying is random; for count traces rescale the counts instead, which is exact)."""
    check_positive("peak", target_qps)
    peak = peak_rate_binned(arrivals_s, window_s)
    if peak <= 0:
        raise ValueError("cannot rescale an empty trace to a peak rate")
    return scale_rate(arrivals_s, target_qps / peak, rng)


def compress(arrivals_s: np.ndarray, factor: float) -> np.ndarray:
    """Time compression: the same requests in ``1/factor`` of the time (rates times ``factor``)."""
    check_positive("compression", factor)
    return np.asarray(arrivals_s, dtype=float) / factor


def time_slice(arrivals_s: np.ndarray, start_s: float, duration_s: float | None) -> np.ndarray:
    """The arrivals in ``[start, start + duration)``, shifted to start at 0."""
    if start_s < 0:
        raise ValueError(f"slice start must be >= 0 s, got {start_s}")
    a = np.asarray(arrivals_s, dtype=float)
    end = np.inf if duration_s is None else start_s + duration_s
    return a[(a >= start_s) & (a < end)] - start_s


def inter_arrival_stats(arrivals_s: np.ndarray) -> tuple[float, float]:
    """(mean rate in qps, CV^2 of the inter-arrival gaps) — what the generators promise."""
    gaps = np.diff(np.asarray(arrivals_s, dtype=float))
    if len(gaps) < 2:
        raise ValueError("need at least three arrivals to measure rate and CV^2")
    mean = float(gaps.mean())
    return 1.0 / mean, float(gaps.var() / (mean * mean))
