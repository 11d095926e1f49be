"""The planning problem: a self-contained description of what to plan for, as frozen dataclasses.

A problem is loaded from a JSON file (:func:`load_problem`, format in ``docs/planner.md``) or built
from a pipeline spec plus a profile store (:func:`slipstream.planner.profiles.problem_from_pipeline`). Every
planner mode and the estimator read only this. Validation errors name the path of the bad field
(``stages[1].variants[0].latency_ms.cpu``), the way ``slipstream.streams.spec`` does.

Rates: ``rate_qps`` is the *planning rate* (the analytical models size capacity for it);
``arrivals_s`` is the sample trace the estimator replays to check a plan. When the file gives only a
rate, the sample is a seeded Poisson trace of ``sim_seconds``; when it gives only a trace, the
planning rate is the peak of the trace's sliding ``rate_window_s`` mean (documented in docs/planner.md).

Host: ``host`` is the machine the stages run on, its cores and what the co-located processes take
of them (declared: the file's ``host``, :func:`declared_host`; measured: :func:`fit_colocated`, or a
calibration's fitted free cores). The planner plans within it (``slipstream.planner.cores``), on hardware that
fits it (:meth:`Problem.fits_host`), and the estimator shares its cores (``slipstream.planner.sim.host``).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping, Optional, Union

import numpy as np
from pydantic import Field

from ..streams.arrivals import peak_rate_sliding, poisson_arrivals, read_arrivals
from ..streams.docmodel import Doc, load_document, read
from ..streams.graph import StageGraph, reference_error
from ..streams.latency import LatencyCurve
from ..streams.placement import cgroup_cpu_limit, cores_left
from ..streams.spec import EdgeDoc
from .sim.params import HostModel, Network, ServiceTime

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

    @property
    def host_cores(self) -> int:
        """Cores of the host a batch on it keeps busy: its threads on a CPU, none on an accelerator."""
        return self.threads if self.kind == "cpu" else 0


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
    max_stage_replicas: int | None = None  # no stage above this many (what one host or Deployment runs)
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    activation_s: float = 5.0  # replica activation (consumer rebalance pause) time
    hop_ms: float = 0.0  # Kafka transit per hop (produce -> consume), added by the estimator
    network: Network | None = None  # measured transits (a calibration); None: hop_ms on every hop
    service: ServiceTime = ServiceTime()  # a batch's run time around its (calibrated) profile
    host: HostModel | None = None  # the host and its co-located load (declared or a calibration's); None: unbounded
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

    def stage_cap(self) -> int | None:
        """The most replicas any one stage may have: the per-stage cap, or the cluster cap (None: no cap)."""
        caps = [c for c in (self.max_stage_replicas, self.max_replicas) if c is not None]
        return min(caps) if caps else None

    def fits_host(self, hardware: str) -> bool:
        """Whether a replica on ``hardware`` fits the host (always, without one): no more threads than
        its whole cores (a cgroup limit rounded down) that its background load does not wholly take
        (``slipstream.streams.placement.cores_left``)."""
        if self.host is None:
            return True
        whole = max(1, math.floor(self.host.cores + 1e-9))
        return self.hardware[hardware].host_cores <= cores_left(self.host.background_cores, whole)

    def curves_on_host(self, stage: str, variant: str) -> dict[str, LatencyCurve]:
        """A variant's latency curves on the hardware that fits the host (:meth:`fits_host`)."""
        return {h: c for h, c in self.stage(stage).variant(variant).latency.items() if self.fits_host(h)}

    def stage_rate(self, stage: str, rate_qps: float | None = None) -> float:
        return (self.rate_qps if rate_qps is None else rate_qps) * self.visit_ratio(stage)

    def windows_per_request(self) -> float:
        """Windows one request makes at windows of one item: the sum of its stages' visit ratios
        (what ``HostModel.per_request_ms`` and ``colocated_cores`` take)."""
        return sum(self.visit_ratio(s) for s in self.topo_order)

    def colocated_cores(self, rate_qps: float | None = None) -> float:
        """Cores the host's co-located processes and the workers' own work keep busy at ``rate_qps``
        (default the problem's; 0 without a host)."""
        if self.host is None:
            return 0.0
        return self.host.colocated_cores(self.rate_qps if rate_qps is None else rate_qps,
                                         self.windows_per_request())

    def batch_sizes_for(self, curve: LatencyCurve) -> tuple[int, ...]:
        """Batch sizes a curve may be used at: never beyond the largest measured size."""
        top = max(curve.points_ms)
        return tuple(b for b in self.batch_sizes if b <= top) or (min(curve.points_ms),)


def declared_host(cores: float | None = None, background_cores: float = 0.0,
                  request_cpu_ms: float = 0.0, window_cpu_ms: float = 0.0) -> HostModel:
    """A host as declared: ``cores`` (None: this process's, its cgroup's CPU limit when one is set,
    else the machine's count), what runs there whatever the rate (``background_cores``), per
    request (``request_cpu_ms``: the broker's, the load generator's and the gateway's CPU time over a
    request's hops) and per window a stage's worker takes (``window_cpu_ms``; ``HostModel``)."""
    if cores is None:
        limit, count = cgroup_cpu_limit(), float(os.cpu_count() or 1)
        cores = count if limit is None else min(limit, count)
    return HostModel(float(cores), float(background_cores), float(request_cpu_ms), float(window_cpu_ms))


def fit_colocated(rates_qps, busy_cores) -> tuple[float, float]:
    """What the co-located processes take, measured: (background cores, CPU ms per request) of the
    least-squares line ``busy = background + rate x ms / 1000`` through samples of their busy cores
    (CPU seconds per second, e.g. from ``/proc/PID/stat``) at the pipeline's request rates, neither
    below 0. One rate alone: all of it per request."""
    r, b = np.asarray(rates_qps, dtype=float), np.asarray(busy_cores, dtype=float)
    if r.size == 0 or r.size != b.size:
        raise ValueError(f"fit_colocated needs as many busy-core samples as rates, at least one: {r.size}, {b.size}")
    if np.ptp(r) == 0:
        return 0.0, float(max(b.mean(), 0.0) / max(r[0], 1e-9) * 1000.0)
    slope, fixed = np.polyfit(r, b, 1)
    if fixed < 0:
        return 0.0, float(max(np.sum(r * b) / np.sum(r * r), 0.0) * 1000.0)
    if slope < 0:
        return float(b.mean()), 0.0
    return float(fixed), float(slope * 1000.0)


# ----------------------------------------------------------------------------------------------
# Arrivals (generators, the file reader and the rates: slipstream.streams.arrivals)


def read_sample(path: str | Path) -> np.ndarray:
    """A planning sample from an arrival file (``slipstream.streams.arrivals.read_arrivals``), shifted to start at 0."""
    a = read_arrivals(path)
    return a - a[0] if a.size else a


# ----------------------------------------------------------------------------------------------
# JSON loading: the document models (on slipstream.streams.docmodel, like the pipeline spec's), then the problem

Points = dict[str, Annotated[float, Field(gt=0)]]  # batch size (a JSON key) -> latency in ms


class HardwareOptionDoc(Doc):
    cost_per_hour: float = Field(ge=0)
    kind: str = "cpu"
    threads: int = Field(1, ge=1)


class VariantOptionDoc(Doc):
    name: str = Field(min_length=1)
    accuracy: float = Field(1.0, ge=0, le=1)
    latency_ms: dict[str, Points] = Field(min_length=1, description="hardware -> batch size -> ms")


class StageOptionDoc(Doc):
    name: str = Field(min_length=1)
    variants: list[VariantOptionDoc] = Field(min_length=1)


class ArrivalDoc(Doc):
    rate_qps: Optional[float] = Field(None, ge=0)
    trace: Optional[str] = None
    sim_seconds: float = Field(60.0, ge=1)
    rate_window_s: float = Field(1.0, ge=1e-3)


class HostDoc(Doc):
    cores: Union[Annotated[float, Field(gt=0)], Literal["auto"]] = Field(
        "auto", description="the host's cores; auto: this process's cgroup CPU limit, else the machine's count")
    background_cores: float = Field(0.0, ge=0, description="cores other work takes whatever the rate")
    request_cpu_ms: float = Field(0.0, ge=0, description="co-located CPU ms per request: broker, load generator, gateway")
    window_cpu_ms: float = Field(0.0, ge=0, description="CPU ms per window a stage's worker takes: fetch, produce, commit")


class ProblemDoc(Doc):
    slo_ms: float = Field(ge=1e-3)
    arrival: ArrivalDoc
    hardware: dict[str, HardwareOptionDoc] = Field(min_length=1)
    stages: list[StageOptionDoc] = Field(min_length=1)
    edges: list[EdgeDoc] = Field(default_factory=list)
    seed: int = Field(0, ge=0)
    objective: Literal["cost", "accuracy"] = "cost"
    accuracy_weight: float = Field(1.0, ge=0)
    accuracy_floor: Optional[float] = Field(None, ge=0, le=1)
    max_replicas: Optional[int] = Field(None, ge=1)
    max_stage_replicas: Optional[int] = Field(None, ge=1)
    batch_sizes: list[Annotated[int, Field(ge=1)]] = Field(list(DEFAULT_BATCH_SIZES), min_length=1)
    activation_s: float = Field(5.0, ge=0)
    hop_ms: float = Field(0.0, ge=0)
    min_partitions: int = Field(4, ge=1)
    mix: bool = False
    host: Optional[HostDoc] = None


def _fail(path: str, expected: str, got: Any) -> ProblemError:
    return ProblemError(f"{path}: expected {expected}, got {got!r}")


def parse_curve(points: Mapping[str, float], path: str) -> LatencyCurve:
    pts: dict[int, float] = {}
    for b, ms in points.items():
        try:
            pts[int(b)] = float(ms)
        except (TypeError, ValueError):
            raise _fail(f"{path}.{b}", "an integer batch size as key", b) from None
        if int(b) < 1:
            raise _fail(f"{path}.{b}", "batch size >= 1", b)
    if not pts:
        raise _fail(path, "at least one batch size", {})
    return LatencyCurve.fit(pts)


def _stage_option(s: StageOptionDoc, path: str, hw: Mapping[str, HardwareOption]) -> StageOption:
    variants = []
    for j, v in enumerate(s.variants):
        vp = f"{path}.variants[{j}]"
        for hname in v.latency_ms:
            if hname not in hw:
                raise _fail(f"{vp}.latency_ms.{hname}", f"a hardware name, one of {sorted(hw)}", hname)
        variants.append(VariantOption(v.name, v.accuracy, {h: parse_curve(pts, f"{vp}.latency_ms.{h}")
                                                            for h, pts in v.latency_ms.items()}))
    return StageOption(s.name, tuple(variants))


def _arrivals(arr: ArrivalDoc, base_dir: Path, seed: int) -> tuple[float, np.ndarray]:
    """(planning rate, sample trace) of the arrival section."""
    if arr.trace is not None:
        tp = Path(arr.trace)
        try:
            trace = read_sample(tp if tp.is_absolute() else base_dir / tp)
        except (OSError, ValueError) as exc:
            raise _fail("arrival.trace", "a readable file of arrival times in seconds", str(exc)) from None
        rate = peak_rate_sliding(trace, arr.rate_window_s) if arr.rate_qps is None else arr.rate_qps
        return rate, trace
    if arr.rate_qps is not None:
        return arr.rate_qps, poisson_arrivals(arr.rate_qps, arr.sim_seconds, seed)
    raise _fail("arrival", "an object with rate_qps or trace", arr.model_dump(exclude_defaults=True))


def _host(h: HostDoc | None) -> HostModel | None:
    if h is None:
        return None
    try:
        return declared_host(None if h.cores == "auto" else h.cores, h.background_cores, h.request_cpu_ms, h.window_cpu_ms)
    except ValueError as exc:
        raise _fail("host", "background_cores below cores", str(exc)) from None


def parse_problem(doc: Any, *, base_dir: Path = Path("."), name: str = "problem") -> Problem:
    d = read(ProblemDoc, doc, "", ProblemError)
    hw = {n: HardwareOption(n, h.cost_per_hour, h.kind, h.threads) for n, h in d.hardware.items()}
    stages = [_stage_option(s, f"stages[{i}]", hw) for i, s in enumerate(d.stages)]
    if (wrong := reference_error([s.name for s in stages], d.edges)) is not None:
        raise _fail(*wrong)
    rate, trace = _arrivals(d.arrival, base_dir, d.seed)
    problem = Problem(
        slo_ms=d.slo_ms, rate_qps=rate, hardware=hw, stages=tuple(stages),
        edges=tuple(EdgeOption(e.src, e.dst, e.fanout, e.probability) for e in d.edges),
        arrivals_s=trace, objective=d.objective, accuracy_weight=d.accuracy_weight,
        accuracy_floor=d.accuracy_floor, max_replicas=d.max_replicas, max_stage_replicas=d.max_stage_replicas,
        batch_sizes=tuple(sorted(set(d.batch_sizes))), activation_s=d.activation_s, hop_ms=d.hop_ms,
        min_partitions=d.min_partitions, mix=d.mix, seed=d.seed, name=name, host=_host(d.host))
    if (wrong := problem.shape_error()) is not None:
        raise _fail("edges", *wrong)
    return problem


def load_problem(path: str | Path) -> Problem:
    p = Path(path)
    doc = load_document(p, "problem", ProblemError, fmt="json")
    try:
        return parse_problem(doc, base_dir=p.parent, name=p.stem)
    except ProblemError as exc:
        raise ProblemError(f"{p}: {exc}") from None
