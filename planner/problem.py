"""The planning problem: a self-contained description of what to plan for, as frozen dataclasses.

A problem is loaded from a JSON file (:func:`load_problem`, format in ``docs/planner.md``) or built
from a pipeline spec plus a profile store (:func:`planner.profiles.problem_from_pipeline`). Every
planner mode and the estimator read only this. Validation errors name the path of the bad field
(``stages[1].variants[0].latency_ms.cpu``), the way ``streams.spec`` does.

Rates: ``rate_qps`` is the *planning rate* (the analytical models size capacity for it);
``arrivals_s`` is the sample trace the estimator replays to check a plan. When the file gives only a
rate, the sample is a seeded Poisson trace of ``sim_seconds``; when it gives only a trace, the
planning rate is the peak of the trace's sliding ``rate_window_s`` mean (documented in docs/planner.md).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from planner.sim.params import HostModel, Network, ServiceTime
from streams.graph import StageGraph
from streams.latency import LatencyCurve

DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)
OBJECTIVES = ("cost", "accuracy")


class ProblemError(ValueError):
    """A planning problem that does not validate; the message names the field path."""


@dataclass(frozen=True)
class HardwareOption:
    name: str
    cost_per_hour: float
    kind: str = "cpu"
    threads: int = 1


@dataclass(frozen=True)
class VariantOption:
    name: str
    accuracy: float
    latency: Mapping[str, LatencyCurve]  # hardware name -> batch latency curve (high percentile, ms)


@dataclass(frozen=True)
class StageOption:
    name: str
    variants: tuple[VariantOption, ...]

    def variant(self, name: str) -> VariantOption:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(f"stage {self.name!r} has no variant {name!r}")


@dataclass(frozen=True)
class EdgeOption:
    src: str
    dst: str
    fanout: float = 1.0
    probability: float = 1.0


@dataclass(frozen=True)
class Problem(StageGraph):
    slo_ms: float
    rate_qps: float
    hardware: Mapping[str, HardwareOption]
    stages: tuple[StageOption, ...]
    edges: tuple[EdgeOption, ...] = ()
    arrivals_s: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False, repr=False)
    objective: str = "cost"
    accuracy_weight: float = 1.0  # $/h per unit of expected log pipeline accuracy (objective=accuracy)
    accuracy_floor: float | None = None  # INFaaS: every request's pipeline accuracy >= floor
    max_replicas: int | None = None  # cluster cap: total replicas over all stages
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    activation_s: float = 5.0  # replica activation (consumer rebalance pause) time
    hop_ms: float = 0.0  # Kafka transit per hop (produce -> consume), added by the estimator
    network: Network | None = None  # measured transits (a calibration); None: hop_ms on every hop
    service: ServiceTime = ServiceTime()  # a batch's run time around its (calibrated) profile
    host: HostModel | None = None  # cores the stages' batches share (a calibration's); None: no sharing
    min_partitions: int = 4
    mix: bool = False  # let a stage combine several configs (INFaaS's "2B + 1C"); slower MILP
    seed: int = 0
    name: str = "problem"

    def __post_init__(self) -> None:
        if self.slo_ms <= 0:
            raise ProblemError(f"slo_ms: expected > 0, got {self.slo_ms}")
        if self.rate_qps < 0:
            raise ProblemError(f"arrival.rate_qps: expected >= 0, got {self.rate_qps}")
        if self.objective not in OBJECTIVES:
            raise ProblemError(f"objective: expected one of {OBJECTIVES}, got {self.objective!r}")

    # graph queries (stage, children, parents, source, topo_order, visit_ratio, paths): StageGraph

    def stage_rate(self, stage: str, rate_qps: float | None = None) -> float:
        return (self.rate_qps if rate_qps is None else rate_qps) * self.visit_ratio(stage)

    def batch_sizes_for(self, curve: LatencyCurve) -> tuple[int, ...]:
        """Batch sizes a curve may be used at: never beyond the largest measured size."""
        top = max(curve.points_ms)
        return tuple(b for b in self.batch_sizes if b <= top) or (min(curve.points_ms),)


# ----------------------------------------------------------------------------------------------
# Arrivals


def poisson_trace(rate_qps: float, seconds: float, seed: int) -> np.ndarray:
    """A seeded Poisson arrival trace (seconds from 0)."""
    if rate_qps <= 0:
        return np.zeros(0)
    rng = np.random.default_rng(seed)
    n = int(rate_qps * seconds * 1.2) + 50
    t = np.cumsum(rng.exponential(1.0 / rate_qps, size=n))
    return t[t < seconds]


def peak_rate(arrivals_s: np.ndarray, window_s: float) -> float:
    """The largest number of arrivals in any window of ``window_s`` (sliding), divided by the window."""
    a = np.sort(np.asarray(arrivals_s, dtype=float))
    if a.size == 0:
        return 0.0
    ends = np.searchsorted(a, a + window_s, side="left")
    return float((ends - np.arange(a.size)).max()) / window_s


def mean_rate(arrivals_s: np.ndarray) -> float:
    a = np.asarray(arrivals_s, dtype=float)
    if a.size < 2:
        return float(a.size)
    return float(a.size / max(a[-1] - a[0], 1e-9))


def read_trace(path: Path) -> np.ndarray:
    vals = [float(x) for x in path.read_text().split() if x.strip()]
    a = np.sort(np.asarray(vals, dtype=float))
    return a - a[0] if a.size else a


# ----------------------------------------------------------------------------------------------
# JSON loading


def _fail(path: str, expected: str, got: Any) -> ProblemError:
    return ProblemError(f"{path}: expected {expected}, got {got!r}")


def _num(m: Mapping, key: str, path: str, *, lo: float = 0.0, hi: float = math.inf,
         default: Any = ..., integer: bool = False) -> Any:
    p = f"{path}.{key}" if path else key
    if key not in m:
        if default is ...:
            raise ProblemError(f"{p}: required field is missing")
        return default
    v = m[key]
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok or not (lo <= v <= hi):
        raise _fail(p, ("an integer" if integer else "a number") + f" in [{lo}, {hi}]", v)
    return int(v) if integer else float(v)


def _map(v: Any, path: str) -> Mapping:
    if not isinstance(v, Mapping):
        raise _fail(path, "an object", v)
    return v


def _list(v: Any, path: str) -> list:
    if not isinstance(v, list):
        raise _fail(path, "a list", v)
    return v


def parse_curve(points: Any, path: str) -> LatencyCurve:
    pts: dict[int, float] = {}
    for b, ms in _map(points, path).items():
        try:
            bi = int(b)
        except (TypeError, ValueError):
            raise _fail(f"{path}.{b}", "an integer batch size as key", b) from None
        if bi < 1 or isinstance(ms, bool) or not isinstance(ms, (int, float)) or ms <= 0:
            raise _fail(f"{path}.{b}", "batch size >= 1 mapped to a latency in ms > 0", ms)
        pts[bi] = float(ms)
    if not pts:
        raise _fail(path, "at least one batch size", {})
    return LatencyCurve.fit(pts)


def parse_problem(doc: Any, *, base_dir: Path = Path("."), name: str = "problem") -> Problem:
    top = _map(doc, "(top level)")
    slo_ms = _num(top, "slo_ms", "", lo=1e-3)
    hw: dict[str, HardwareOption] = {}
    for hname, hdoc in _map(top.get("hardware"), "hardware").items():
        h = _map(hdoc, f"hardware.{hname}")
        hw[hname] = HardwareOption(hname, _num(h, "cost_per_hour", f"hardware.{hname}"),
                                   str(h.get("kind", "cpu")),
                                   _num(h, "threads", f"hardware.{hname}", lo=1, default=1, integer=True))
    if not hw:
        raise _fail("hardware", "at least one hardware type", {})
    stages: list[StageOption] = []
    for i, sdoc in enumerate(_list(top.get("stages"), "stages")):
        sp = f"stages[{i}]"
        s = _map(sdoc, sp)
        sname = s.get("name")
        if not isinstance(sname, str) or not sname:
            raise _fail(f"{sp}.name", "a stage name", sname)
        variants = []
        for j, vdoc in enumerate(_list(s.get("variants"), f"{sp}.variants")):
            vp = f"{sp}.variants[{j}]"
            v = _map(vdoc, vp)
            vname = v.get("name")
            if not isinstance(vname, str) or not vname:
                raise _fail(f"{vp}.name", "a variant name", vname)
            lat = {}
            for hname, pts in _map(v.get("latency_ms"), f"{vp}.latency_ms").items():
                if hname not in hw:
                    raise _fail(f"{vp}.latency_ms.{hname}", f"a hardware name, one of {sorted(hw)}", hname)
                lat[hname] = parse_curve(pts, f"{vp}.latency_ms.{hname}")
            if not lat:
                raise _fail(f"{vp}.latency_ms", "latency on at least one hardware", {})
            variants.append(VariantOption(vname, _num(v, "accuracy", vp, hi=1.0, default=1.0), lat))
        if not variants:
            raise _fail(f"{sp}.variants", "at least one variant", [])
        stages.append(StageOption(sname, tuple(variants)))
    if not stages:
        raise _fail("stages", "at least one stage", [])
    names = [s.name for s in stages]
    if len(set(names)) != len(names):
        raise _fail("stages", "unique stage names", names)
    edges = []
    for i, edoc in enumerate(_list(top.get("edges", []), "edges")):
        ep = f"edges[{i}]"
        e = _map(edoc, ep)
        for key in ("from", "to"):
            if e.get(key) not in names:
                raise _fail(f"{ep}.{key}", f"a stage name, one of {names}", e.get(key))
        edges.append(EdgeOption(e["from"], e["to"], _num(e, "fanout", ep, default=1.0),
                                _num(e, "probability", ep, hi=1.0, default=1.0)))

    arr = _map(top.get("arrival"), "arrival")
    seed = _num(top, "seed", "", default=0, integer=True)
    sim_seconds = _num(arr, "sim_seconds", "arrival", lo=1.0, default=60.0)
    if "trace" in arr:
        tp = Path(str(arr["trace"]))
        tp = tp if tp.is_absolute() else base_dir / tp
        try:
            trace = read_trace(tp)
        except (OSError, ValueError) as exc:
            raise _fail("arrival.trace", "a readable file of arrival times in seconds", str(exc)) from None
        window = _num(arr, "rate_window_s", "arrival", lo=1e-3, default=1.0)
        rate = _num(arr, "rate_qps", "arrival", default=peak_rate(trace, window))
    elif "rate_qps" in arr:
        rate = _num(arr, "rate_qps", "arrival")
        trace = poisson_trace(rate, sim_seconds, seed)
    else:
        raise _fail("arrival", "an object with rate_qps or trace", dict(arr))

    floor = top.get("accuracy_floor")
    if floor is not None:
        floor = _num(top, "accuracy_floor", "", hi=1.0)
    cap = top.get("max_replicas")
    if cap is not None:
        cap = _num(top, "max_replicas", "", lo=1, integer=True)
    bsz = top.get("batch_sizes", list(DEFAULT_BATCH_SIZES))
    if not isinstance(bsz, list) or not bsz or not all(isinstance(b, int) and b >= 1 for b in bsz):
        raise _fail("batch_sizes", "a list of integers >= 1", bsz)
    objective = top.get("objective", "cost")
    if objective not in OBJECTIVES:
        raise _fail("objective", f"one of {OBJECTIVES}", objective)
    problem = Problem(
        slo_ms=slo_ms, rate_qps=rate, hardware=hw, stages=tuple(stages), edges=tuple(edges),
        arrivals_s=trace, objective=objective,
        accuracy_weight=_num(top, "accuracy_weight", "", default=1.0),
        accuracy_floor=floor, max_replicas=cap, batch_sizes=tuple(sorted(set(bsz))),
        activation_s=_num(top, "activation_s", "", default=5.0),
        hop_ms=_num(top, "hop_ms", "", default=0.0),
        min_partitions=_num(top, "min_partitions", "", lo=1, default=4, integer=True),
        mix=bool(top.get("mix", False)), seed=seed, name=name)
    sources = [s for s in names if not problem.parents(s)]
    if len(sources) != 1:
        raise _fail("edges", "exactly one source stage", sources)
    if len(problem.topo_order) != len(stages):
        raise _fail("edges", "an acyclic graph", [f"{e.src}->{e.dst}" for e in edges])
    return problem


def load_problem(path: str | Path) -> Problem:
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except FileNotFoundError:
        raise ProblemError(f"{p}: no such problem file") from None
    except json.JSONDecodeError as exc:
        raise ProblemError(f"{p}: not valid JSON: {exc}") from None
    try:
        return parse_problem(doc, base_dir=p.parent, name=p.stem)
    except ProblemError as exc:
        raise ProblemError(f"{p}: {exc}") from None
