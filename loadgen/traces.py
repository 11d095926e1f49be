"""Trace sources as one-line specs (usable from the CLI), and the readers of published trace files.

Grammar (documented with examples in docs/loadgen.md)::

    SPEC  := KIND ":" ITEM ("," ITEM)*
    ITEM  := KEY "=" VALUE | PATH          # PATH: first item of file/twitter/azure; no ',' or '=' in it
    VALUE := NUMBER ("/" NUMBER)* | WORD    # '/' separates list items (rates=20/80)

    poisson:rate=Q,duration=S
    gamma:rate=Q,cv2=C,duration=S
    step:rates=Q1/Q2[/..],at=T1[/..],duration=S[,cv2=C|C1/C2..][,transition=S][,shape=sigmoid|linear]
    file:PATH                 arrival times in seconds (slipstream.streams.arrivals.read_arrivals: .npy, or numbers
                              per line; '#' comments and blank lines skipped)
    twitter:PATH              IPA's per-second counts: the .tbz2 (bzip2 tar holding workload.txt) or
                              the text file itself, space-separated integers
    azure:PATH,row=N          Azure Functions 2019 per-minute counts (HashOwner,HashApp,HashFunction,
                              Trigger,1..1440); N is the 0-based data row

Options every kind accepts, applied in this order (T = time of the source, before any re-timing):

    start=S,duration=S   slice [start, start+duration) of the source (synthetic kinds: duration is
                         the generated length and start is not allowed)
    peak=Q | mean=Q      rescale the rate so its peak 1-s rate (or mean rate) is Q; exact on count
                         traces (counts are scaled before spreading), approximate on arrival lists
    bin=S                count traces only: replay each trace bin as S seconds at the bin's rate
                         (InferLine replayed each minute of a per-minute trace for 30 s: bin=30)
    spread=uniform|poisson|even   count traces only: how a bin's count becomes arrival times
    speedup=F            time compression: the same requests in 1/F of the time
    scale=K              rate x K on the same timeline (thinning or in-between copies)
    seed=N               the seed of every random choice (default: the caller's seed)

Every spec returns a sorted float64 numpy array of arrival seconds from 0.
"""
from __future__ import annotations

import csv
import re
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np

from ..streams.arrivals import ArrivalsError, gamma_arrivals, poisson_arrivals, read_arrivals
from . import workloads as w

SYNTHETIC = ("poisson", "gamma", "step")
COUNT_KINDS = {"twitter": 1.0, "azure": 60.0}  # kind -> seconds per bin in the source
KINDS = SYNTHETIC + ("file",) + tuple(COUNT_KINDS)
_COMMON = {"start", "duration", "peak", "mean", "speedup", "scale", "seed"}
_ALLOWED = {
    "poisson": {"rate"} | _COMMON - {"start"},
    "gamma": {"rate", "cv2"} | _COMMON - {"start"},
    "step": {"rates", "at", "cv2", "transition", "shape"} | _COMMON - {"start"},
    "file": _COMMON,
    "twitter": {"bin", "spread"} | _COMMON,
    "azure": {"row", "bin", "spread"} | _COMMON,
}
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


class TraceSpecError(ValueError):
    """A trace spec that does not parse; the message quotes the spec and the bad item."""


@dataclass(frozen=True)
class TraceSpec:
    kind: str
    path: str | None = None
    params: Mapping[str, str] = field(default_factory=dict)
    text: str = ""

    def number(self, key: str, default: float | None = None) -> float:
        if key not in self.params:
            if default is None:
                raise TraceSpecError(f"trace {self.text!r}: {self.kind} needs {key}=")
            return default
        return _to_number(self, key, self.params[key])

    def numbers(self, key: str) -> list[float]:
        if key not in self.params:
            raise TraceSpecError(f"trace {self.text!r}: {self.kind} needs {key}=")
        return [_to_number(self, key, v) for v in self.params[key].split("/")]

    def word(self, key: str, default: str) -> str:
        return self.params.get(key, default)


def _to_number(spec: TraceSpec, key: str, value: str) -> float:
    if not _NUMBER.match(value):
        raise TraceSpecError(f"trace {spec.text!r}: {key}={value!r} is not a number")
    return float(value)


def parse_trace_spec(text: str) -> TraceSpec:
    kind, sep, rest = text.partition(":")
    kind = kind.strip().lower()
    if not sep or kind not in KINDS:
        raise TraceSpecError(f"trace {text!r}: expected KIND:ARGS with KIND one of {', '.join(KINDS)}")
    items = [i.strip() for i in rest.split(",")] if rest.strip() else []
    path: str | None = None
    params: dict[str, str] = {}
    for n, item in enumerate(items):
        key, eq, value = item.partition("=")
        if not eq:
            if n == 0 and kind not in SYNTHETIC and item:
                path = item
                continue
            raise TraceSpecError(f"trace {text!r}: item {item!r} is not KEY=VALUE")
        key = key.strip().lower()
        if key not in _ALLOWED[kind]:
            raise TraceSpecError(f"trace {text!r}: {kind} does not take {key}= "
                                 f"(it takes {', '.join(sorted(_ALLOWED[kind]))})")
        if key in params:
            raise TraceSpecError(f"trace {text!r}: {key}= given twice")
        params[key] = value.strip()
    if kind not in SYNTHETIC and path is None:
        raise TraceSpecError(f"trace {text!r}: {kind} needs a path, e.g. {kind}:PATH")
    if "peak" in params and "mean" in params:
        raise TraceSpecError(f"trace {text!r}: give peak= or mean=, not both")
    return TraceSpec(kind=kind, path=path, params=params, text=text)


def first_step_s(text: str) -> float | None:
    """When a ``step:`` trace's rate starts to change (its first ``at=``, after ``speedup=``): the end
    of its first phase. None for the other kinds, which have no steps."""
    spec = parse_trace_spec(text)
    if spec.kind != "step":
        return None
    return spec.numbers("at")[0] / spec.number("speedup", 1.0)


# ----------------------------------------------------------------------------------------------
# Readers of trace files


def read_arrival_file(path: str | Path) -> np.ndarray:
    """The arrival times of ``path`` (``slipstream.streams.arrivals.read_arrivals``), sorted; a bad file is a
    :class:`TraceSpecError` naming the line."""
    try:
        return read_arrivals(path)
    except ArrivalsError as exc:
        raise TraceSpecError(str(exc)) from None


def read_twitter_counts(path: str | Path) -> np.ndarray:
    """IPA's Twitter trace: requests per second, from the .tbz2 or from workload.txt itself."""
    p = Path(path)
    if tarfile.is_tarfile(p):
        with tarfile.open(p, "r:*") as tar:
            member = next((m for m in tar.getmembers() if m.isfile() and m.name.endswith(".txt")), None)
            if member is None:
                raise TraceSpecError(f"{p}: no .txt member (expected workload.txt)")
            text = tar.extractfile(member).read().decode()
    else:
        text = p.read_text()
    try:
        counts = np.array(text.split(), dtype=np.int64)
    except ValueError:
        raise TraceSpecError(f"{p}: expected space-separated integers (requests per second)") from None
    if np.any(counts < 0):
        raise TraceSpecError(f"{p}: negative request count")
    return counts


def read_azure_counts(path: str | Path, row: int) -> np.ndarray:
    """Azure Functions 2019 invocations per minute of the ``row``-th function (0-based)."""
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if not header or header[:4] != ["HashOwner", "HashApp", "HashFunction", "Trigger"]:
            raise TraceSpecError(f"{path}: not the Azure 2019 invocations layout "
                                 "(HashOwner,HashApp,HashFunction,Trigger,1..1440)")
        rows = list(reader)
    if not 0 <= row < len(rows):
        raise TraceSpecError(f"{path}: row={row} out of range: the file has {len(rows)} functions (0-based)")
    return np.array([int(v) for v in rows[row][4:]], dtype=np.int64)


# ----------------------------------------------------------------------------------------------
# Building arrivals from a spec


def load_trace(spec: str | TraceSpec, *, seed: int = 0) -> np.ndarray:
    """Arrival seconds from 0 for a trace spec (see the module docstring for the grammar)."""
    s = parse_trace_spec(spec) if isinstance(spec, str) else spec
    rng = np.random.default_rng(int(s.number("seed", float(seed))))
    if s.kind in COUNT_KINDS:
        arrivals = _from_counts(s, rng)
    else:
        arrivals = _synthetic(s, rng) if s.kind in SYNTHETIC else read_arrival_file(s.path)
        if s.kind == "file":
            arrivals = w.time_slice(arrivals, s.number("start", 0.0), _opt(s, "duration"))
        if "peak" in s.params:
            arrivals = w.rescale_to_peak(arrivals, s.number("peak"), rng)
        elif "mean" in s.params:
            span = _opt(s, "duration") or (float(arrivals[-1]) if len(arrivals) else 0.0)
            if len(arrivals) == 0 or span <= 0:
                raise TraceSpecError(f"trace {s.text!r}: cannot rescale an empty trace")
            arrivals = w.scale_rate(arrivals, s.number("mean") / (len(arrivals) / span), rng)
    if "speedup" in s.params:
        arrivals = w.compress(arrivals, s.number("speedup"))
    if "scale" in s.params:
        arrivals = w.scale_rate(arrivals, s.number("scale"), rng)
    return arrivals


def trace_arrivals(spec: str, seed: int) -> np.ndarray:
    """:func:`load_trace` for a command's ``--trace``: a bad spec or file is a usage error naming it."""
    import click

    try:
        return load_trace(spec, seed=seed)
    except (TraceSpecError, OSError, ValueError) as exc:
        raise click.BadParameter(str(exc), param_hint="--trace") from None


def _opt(s: TraceSpec, key: str) -> float | None:
    return s.number(key) if key in s.params else None


def _synthetic(s: TraceSpec, rng: np.random.Generator) -> np.ndarray:
    duration = s.number("duration")
    if s.kind == "poisson":
        return poisson_arrivals(s.number("rate"), duration, rng)
    if s.kind == "gamma":
        return gamma_arrivals(s.number("rate"), s.number("cv2", 1.0), duration, rng)
    rates = s.numbers("rates")
    at = s.numbers("at") if len(rates) > 1 else []
    cv2s = s.numbers("cv2") if "cv2" in s.params else [1.0]
    if len(cv2s) == 1:
        cv2s = cv2s * len(rates)
    if len(at) != len(rates) - 1 or len(cv2s) != len(rates):
        raise TraceSpecError(f"trace {s.text!r}: {len(rates)} rates need {len(rates) - 1} change times "
                             f"in at= and 1 or {len(rates)} values in cv2=")
    phases = [w.Phase(r, c, until) for r, c, until in zip(rates, cv2s, at + [float("inf")])]
    shape = s.word("shape", "sigmoid")
    try:
        return w.varying_arrivals(phases, duration, rng, transition_s=s.number("transition", 0.0), shape=shape)
    except ValueError as exc:
        raise TraceSpecError(f"trace {s.text!r}: {exc}") from None


def _from_counts(s: TraceSpec, rng: np.random.Generator) -> np.ndarray:
    src_bin = COUNT_KINDS[s.kind]
    if s.kind == "twitter":
        counts = read_twitter_counts(s.path).astype(float)
    else:
        row = s.number("row", 0.0)
        if row != int(row):
            raise TraceSpecError(f"trace {s.text!r}: row= must be an integer")
        counts = read_azure_counts(s.path, int(row)).astype(float)
    start, duration = s.number("start", 0.0), _opt(s, "duration")
    if start < 0 or (duration is not None and duration <= 0):
        raise TraceSpecError(f"trace {s.text!r}: need start >= 0 and duration > 0")
    first = int(start // src_bin)
    last = len(counts) if duration is None else int(np.ceil((start + duration) / src_bin))
    counts = counts[first:last]
    if counts.sum() <= 0:
        raise TraceSpecError(f"trace {s.text!r}: the slice holds no requests")
    rates = counts / src_bin
    if "peak" in s.params:
        rates = rates * (s.number("peak") / rates.max())
    elif "mean" in s.params:
        rates = rates * (s.number("mean") / rates.mean())
    out_bin = s.number("bin", src_bin)
    arrivals = w.counts_to_arrivals(rates * out_bin, out_bin, rng, spread=s.word("spread", "uniform"))
    # trim to the exact slice: the slice began `offset` seconds into the first bin
    ratio = out_bin / src_bin
    offset = (start - first * src_bin) * ratio
    length = None if duration is None else duration * ratio
    return w.time_slice(arrivals, offset, length)
