"""Arrivals: a sorted float64 array of request arrival times in seconds. The one place for what every
layer says about them: the two stationary generators, the arrival-file reader, and the rates.

- :func:`gamma_arrivals` — a renewal process with gamma inter-arrivals of mean ``1/rate`` and squared
  coefficient of variation ``cv2`` (InferLine's synthetic load; ``cv2=1`` is Poisson, 4 is bursty);
  :func:`poisson_arrivals` is its ``cv2=1`` case. Every random choice comes from the
  ``numpy.random.Generator`` passed in, so a seed fixes a trace.
- :func:`read_arrivals` — a file of arrival times: ``.npy``, or text with numbers separated by blanks,
  commas or line ends (``#`` starts a comment).
- Two peak rates that answer different questions: :func:`peak_rate_sliding` is the most arrivals in
  any window of ``window_s`` wherever it starts (what a planner must serve: a burst straddling two
  aligned windows counts whole); :func:`peak_rate_binned` is the highest rate over aligned bins
  ``[k*w, (k+1)*w)`` (:func:`rate_series`, the rate curve a ``peak=`` rescale targets). The sliding
  one is never below the binned one.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np


class ArrivalsError(ValueError):
    """A generator's parameter or an arrival file that is not what it must be (the message names it)."""


def check_positive(name: str, value: float) -> None:
    if not np.isfinite(value) or value <= 0:
        raise ArrivalsError(f"{name} must be a positive number, got {value!r}")


def gamma_arrivals(rate_qps: float, cv2: float, duration_s: float, rng: np.random.Generator) -> np.ndarray:
    """Arrivals in ``[0, duration_s)`` of a gamma renewal process: inter-arrival shape ``1/cv2``,
    scale ``cv2/rate``."""
    check_positive("rate", rate_qps)
    check_positive("cv2", cv2)
    check_positive("duration", duration_s)
    shape, scale = 1.0 / cv2, cv2 / rate_qps
    out: list[np.ndarray] = []
    t = 0.0
    chunk = max(int(rate_qps * duration_s * 1.1) + 16, 64)
    while True:
        times = t + np.cumsum(rng.gamma(shape, scale, size=chunk))
        out.append(times)
        t = float(times[-1])
        if t >= duration_s:
            break
    arr = np.concatenate(out)
    return arr[arr < duration_s]


def poisson_arrivals(rate_qps: float, duration_s: float, rng: np.random.Generator | int) -> np.ndarray:
    """Poisson arrivals in ``[0, duration_s)`` (none at rate 0); ``rng`` may be a seed."""
    if rate_qps == 0:
        return np.zeros(0)
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
    return gamma_arrivals(rate_qps, 1.0, duration_s, rng)


def read_arrivals(path: str | Path) -> np.ndarray:
    """Arrival times in seconds (finite, >= 0) from ``path``, sorted: a ``.npy`` array, or text with
    the numbers separated by blanks, commas or line ends; ``#`` comments and blank lines are skipped."""
    p = Path(path)
    if p.suffix == ".npy":
        try:
            vals = np.asarray(np.load(p, allow_pickle=False), dtype=np.float64).ravel()
        except ValueError as exc:
            raise ArrivalsError(f"{path}: not an array of numbers: {exc}") from None
        bad = vals[~(np.isfinite(vals) & (vals >= 0))]
        if bad.size:
            raise ArrivalsError(f"{path}: arrival times must be finite and >= 0, got {bad[0]}")
        return np.sort(vals)
    out: list[float] = []
    for lineno, line in enumerate(p.read_text().splitlines(), 1):
        for item in line.split("#", 1)[0].replace(",", " ").split():
            try:
                v = float(item)
            except ValueError:
                raise ArrivalsError(f"{path}:{lineno}: expected a time in seconds, got {item!r}") from None
            if not np.isfinite(v) or v < 0:
                raise ArrivalsError(f"{path}:{lineno}: arrival times must be finite and >= 0, got {v}")
            out.append(v)
    return np.sort(np.asarray(out, dtype=np.float64))


def rate_series(arrivals_s: np.ndarray, bin_s: float = 1.0, duration_s: float | None = None) -> np.ndarray:
    """Requests per second in each aligned bin of width ``bin_s`` (the rate curve whose shape rescaling
    keeps)."""
    check_positive("bin", bin_s)
    a = np.asarray(arrivals_s, dtype=float)
    end = duration_s if duration_s is not None else (float(a[-1]) if len(a) else 0.0)
    nbins = max(int(np.ceil(end / bin_s)), 1)
    counts = np.bincount(np.minimum((a / bin_s).astype(np.int64), nbins - 1), minlength=nbins)
    return counts[:nbins] / bin_s


def peak_rate_binned(arrivals_s: np.ndarray, window_s: float = 1.0) -> float:
    """Highest rate over aligned windows ``[k*window_s, (k+1)*window_s)``."""
    series = rate_series(arrivals_s, window_s)
    return float(series.max()) if len(series) else 0.0


def peak_rate_sliding(arrivals_s: np.ndarray, window_s: float) -> float:
    """The most arrivals in any window of ``window_s`` wherever it starts, divided by the window."""
    a = np.sort(np.asarray(arrivals_s, dtype=float))
    if a.size == 0:
        return 0.0
    ends = np.searchsorted(a, a + window_s, side="left")
    return float((ends - np.arange(a.size)).max()) / window_s


def mean_rate(arrivals_s: np.ndarray) -> float:
    """Arrivals per second between the first and the last."""
    a = np.asarray(arrivals_s, dtype=float)
    if a.size < 2:
        return float(a.size)
    return float(a.size / max(a[-1] - a[0], 1e-9))
