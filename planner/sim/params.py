"""What the estimator can be told about the world around the agents: frozen, validated parameters.

- :class:`ReplicaChange`: one step of a tuner schedule (a replica group's new count at a time).
- :class:`ShareChange`: one step of a tuner's accuracy scaling (a stage's new routing shares).
- :data:`SCALING_MODES` and :func:`scaling_modes`: how a stage's replica change takes effect.
- :class:`Transit`, :class:`Network`, :func:`next_fetch`: Kafka transit per hop (a distribution) and
  consumer fetches.
- :class:`HostModel`: the host's cores and the co-located processes' CPU (processor sharing).
- :class:`ServiceTime`: how a batch's run time varies around the profiled latency.

Every check names the bad value; the simulator itself never validates again.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from numbers import Integral
from typing import Mapping, Sequence

import numpy as np

from ...streams.batching import NS_PER_MS
from ...streams.shedding import host_ms_per_request

IN_WORKER, REBALANCE = "in-worker", "rebalance"  # replicas inside one worker; a process each
SCALING_MODES = (IN_WORKER, REBALANCE)
TRANSIT_KINDS = ("constant", "shifted-exponential", "lognormal", "empirical", "quantiles")
SERVICE_KINDS = ("deterministic", "exponential", "lognormal")


def _finite_at_least(name: str, value: float, lo: float = 0.0) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < lo:
        raise ValueError(f"{name} must be a finite number >= {lo}, got {value!r}")


@dataclass(frozen=True)
class ReplicaChange:
    """At ``time_s`` the assignment ``index`` of ``stage`` runs ``replicas`` replicas."""

    time_s: float
    stage: str
    replicas: int
    index: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.replicas, bool) or not isinstance(self.replicas, Integral) or self.replicas < 1:
            raise ValueError(f"ReplicaChange.replicas must be an integer >= 1, got {self.replicas!r}")
        if not isinstance(self.index, Integral) or self.index < 0:
            raise ValueError(f"ReplicaChange.index must be an integer >= 0, got {self.index!r}")
        if not math.isfinite(self.time_s):
            raise ValueError(f"ReplicaChange.time_s must be finite, got {self.time_s!r}")


@dataclass(frozen=True)
class ShareChange:
    """At ``time_s`` the stage's pool routes its items by ``shares`` (variant -> weight; a tuner's
    accuracy scaling, ``slipstream.tuner.ladder``): windows taken from then on split by them, each variant at its
    own latency on the pool's hardware, each request on the variant ``slipstream.streams.shares.choose`` gives it."""

    time_s: float
    stage: str
    shares: Mapping[str, float]

    def __post_init__(self) -> None:
        if not self.shares or not all(isinstance(f, (int, float)) and math.isfinite(f) and f >= 0
                                      for f in self.shares.values()) or not sum(self.shares.values()) > 0:
            raise ValueError(f"ShareChange.shares must be finite weights >= 0 summing to more than 0, "
                             f"got {dict(self.shares)!r}")
        if not math.isfinite(self.time_s):
            raise ValueError(f"ShareChange.time_s must be finite, got {self.time_s!r}")


@dataclass(frozen=True)
class BatchingChange:
    """At ``time_s`` the stage runs ``variant`` on ``hardware`` with a new ``max_batch`` and
    ``batch_timeout_ms`` (a re-plan's StageConfig): windows taken from then on use them."""

    time_s: float
    stage: str
    variant: str
    hardware: str
    max_batch: int
    batch_timeout_ms: float

    def __post_init__(self) -> None:
        if isinstance(self.max_batch, bool) or not isinstance(self.max_batch, Integral) or self.max_batch < 1:
            raise ValueError(f"BatchingChange.max_batch must be an integer >= 1, got {self.max_batch!r}")
        _finite_at_least("BatchingChange.batch_timeout_ms", self.batch_timeout_ms)
        if not math.isfinite(self.time_s):
            raise ValueError(f"BatchingChange.time_s must be finite, got {self.time_s!r}")


def scaling_modes(scaling: str | Mapping[str, str], stages: Sequence[str]) -> dict[str, str]:
    """Each stage's scaling mode from one mode for all, or a mapping (stages not named: in-worker)."""
    per = {s: scaling for s in stages} if isinstance(scaling, str) else {s: IN_WORKER for s in stages}
    if not isinstance(scaling, str):
        unknown = sorted(set(scaling) - set(stages))
        if unknown:
            raise ValueError(f"scaling names unknown stages {unknown}; stages are {list(stages)}")
        per.update(scaling)
    for stage, mode in per.items():
        if mode not in SCALING_MODES:
            raise ValueError(f"scaling of stage {stage!r} must be one of {SCALING_MODES}, got {mode!r}")
    return per


@dataclass(frozen=True)
class Transit:
    """Kafka transit of one hop: from the producer's send to the record being fetchable, in ms.

    ``constant``: always ``shift_ms``. ``shifted-exponential``: ``shift_ms`` + an exponential of mean
    ``scale_ms``. ``lognormal``: ``shift_ms`` + a lognormal of median ``scale_ms`` and log-sd ``sigma``.
    ``empirical``: a uniform draw from ``samples_ms`` (measured transits, e.g. ``bench dataplane``'s).
    ``quantiles``: ``samples_ms`` are the quantiles at percentiles ``at_pct`` (ascending, 0 to 100); a
    draw is the quantile at a uniform percentile, interpolated (a calibration stores these: the
    largest value is drawn as rarely as it was measured, not once per stored point).
    """

    kind: str = "constant"
    shift_ms: float = 0.0
    scale_ms: float = 0.0
    sigma: float = 0.0
    samples_ms: tuple[float, ...] = ()
    at_pct: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in TRANSIT_KINDS:
            raise ValueError(f"Transit.kind must be one of {TRANSIT_KINDS}, got {self.kind!r}")
        _finite_at_least("Transit.shift_ms", self.shift_ms)
        _finite_at_least("Transit.scale_ms", self.scale_ms)
        _finite_at_least("Transit.sigma", self.sigma)
        if self.kind == "lognormal" and self.scale_ms <= 0:
            raise ValueError(f"Transit.scale_ms (the lognormal's median) must be > 0, got {self.scale_ms!r}")
        if (self.kind in ("empirical", "quantiles")) != bool(self.samples_ms):
            raise ValueError(f"Transit.samples_ms must be given exactly for kinds 'empirical' and 'quantiles' "
                             f"(kind {self.kind!r}, {len(self.samples_ms)} samples)")
        for i, v in enumerate(self.samples_ms):
            _finite_at_least(f"Transit.samples_ms[{i}]", v)
        if self.kind == "quantiles":
            p = self.at_pct
            if len(p) != len(self.samples_ms) or len(p) < 2 or p[0] != 0 or p[-1] != 100 or list(p) != sorted(set(p)):
                raise ValueError(f"Transit.at_pct must ascend from 0 to 100, one per sample ({len(self.samples_ms)}), "
                                 f"got {p!r}")
            if list(self.samples_ms) != sorted(self.samples_ms):
                raise ValueError("Transit.samples_ms of kind 'quantiles' must not decrease")

    @classmethod
    def constant(cls, ms: float) -> "Transit":
        return cls("constant", shift_ms=ms)

    @classmethod
    def shifted_exponential(cls, shift_ms: float, mean_ms: float) -> "Transit":
        return cls("shifted-exponential", shift_ms=shift_ms, scale_ms=mean_ms)

    @classmethod
    def lognormal(cls, median_ms: float, sigma: float, shift_ms: float = 0.0) -> "Transit":
        return cls("lognormal", shift_ms=shift_ms, scale_ms=median_ms, sigma=sigma)

    @classmethod
    def empirical(cls, samples_ms: Sequence[float]) -> "Transit":
        return cls("empirical", samples_ms=tuple(float(v) for v in samples_ms))

    @classmethod
    def quantiles(cls, values_ms: Sequence[float], at_pct: Sequence[float] | None = None) -> "Transit":
        """From quantiles ``values_ms`` at percentiles ``at_pct`` (default: evenly spaced, 0 to 100)."""
        at = np.linspace(0.0, 100.0, len(values_ms)) if at_pct is None else at_pct
        return cls("quantiles", samples_ms=tuple(float(v) for v in values_ms), at_pct=tuple(float(p) for p in at))

    @classmethod
    def fit_shifted_exponential(cls, samples_ms: Sequence[float]) -> "Transit":
        """Moment fit to measured transits: shift = the minimum, exponential mean = mean - minimum."""
        a = np.asarray(samples_ms, dtype=float)
        if a.size == 0:
            raise ValueError("Transit.fit_shifted_exponential needs at least one sample, got none")
        return cls.shifted_exponential(float(a.min()), float(a.mean() - a.min()))

    @property
    def is_constant(self) -> bool:
        return self.kind == "constant" or (self.kind == "shifted-exponential" and self.scale_ms == 0) or \
            (self.kind == "lognormal" and self.sigma == 0)

    @property
    def mean_ms(self) -> float:
        if self.kind == "empirical":
            return float(np.mean(self.samples_ms))
        if self.kind == "quantiles":  # piecewise linear inverse CDF: the mean of each segment's ends
            v, p = np.asarray(self.samples_ms), np.diff(self.at_pct) / 100.0
            return float(np.sum(p * (v[1:] + v[:-1]) / 2))
        if self.kind == "lognormal":
            return self.shift_ms + self.scale_ms * math.exp(self.sigma ** 2 / 2)
        return self.shift_ms + self.scale_ms

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` transits in ms."""
        if self.kind == "empirical":
            return rng.choice(np.asarray(self.samples_ms, dtype=float), size=n)
        if self.kind == "quantiles":
            return np.interp(100.0 * rng.random(n), self.at_pct, self.samples_ms)
        if self.is_constant:
            return np.full(n, self.mean_ms)
        if self.kind == "lognormal":
            return self.shift_ms + self.scale_ms * np.exp(self.sigma * rng.standard_normal(n))
        return self.shift_ms + rng.exponential(self.scale_ms, n)

    def sample_ns(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.round(self.sample(rng, n) * NS_PER_MS).astype(np.int64)


@dataclass(frozen=True)
class Network:
    """Kafka between the agents: a :class:`Transit` per kind of hop, and the consumers' fetch cadence.

    ``fetch_interval_ms`` > 0: a record becomes visible to a consumer (a worker, the join, the client)
    only at that consumer's next fetch, every ``fetch_interval_ms`` from a random phase of its own.
    """

    ingress: Transit = Transit()  # client -> first stage
    between: Transit = Transit()  # stage -> stage
    to_join: Transit = Transit()  # stage -> join (fragments of a request that fanned out)
    to_results: Transit = Transit()  # last stage (or the join) -> the client's results consumer
    fetch_interval_ms: float = 0.0

    def __post_init__(self) -> None:
        for name in ("ingress", "between", "to_join", "to_results"):
            if not isinstance(getattr(self, name), Transit):
                raise ValueError(f"Network.{name} must be a Transit, got {getattr(self, name)!r}")
        _finite_at_least("Network.fetch_interval_ms", self.fetch_interval_ms)

    @classmethod
    def every_hop(cls, transit: Transit, fetch_interval_ms: float = 0.0) -> "Network":
        return cls(transit, transit, transit, transit, fetch_interval_ms)

    @property
    def fetch_interval_ns(self) -> int:
        return int(round(self.fetch_interval_ms * NS_PER_MS))


def next_fetch(t, cadence: tuple[int, int]):
    """When an item fetchable at ``t`` (ns; an int or a numpy array) is in the hands of a consumer that
    fetches every ``interval`` ns from ``phase``: at its next fetch."""
    interval, phase = cadence
    return t + (phase - t) % interval


@dataclass(frozen=True)
class HostModel:
    """The host the stages' model threads run on, and what else runs there.

    ``cores``: the host's (its cgroup's CPU limit when one is set). ``background_cores``: cores other
    work keeps busy whatever the rate (a calibration's fit of what the batches could not use, or a
    declared fixed load). Beyond the profiles' model time, the CPU of the pipeline's traffic comes in
    two parts:

    - ``request_cpu_ms``, per request the source stage admits, whatever the batches: what each record
      costs over all its hops (its Avro, the broker's share of its bytes, the load generator's send);
    - ``window_cpu_ms``, per window a stage's worker takes: what a window costs its worker and the
      broker once, however many requests it holds (a fetch, a produce, a commit, the hand-off to
      the model). At windows of one item a request pays it once per stage it visits; past the knee
      windows fill and it is shared (issue 40: the classify worker's CPU per request fell from 24.3
      ms at batches of 1.0 to 21.1 at 4.4).

    A request the source refuses from its expiry header (shed or expired,
    ``slipstream.streams.shedding``) costs its worker about 20 us (``slipstream bench drops``) and is
    charged neither. The planner's host bound (:func:`~slipstream.planner.cores.host_qps`) and the
    gate's drain rate charge both at windows of one item (:meth:`per_request_ms`): what the host
    serves at the knee, which past it the host exceeds as windows fill (the estimator simulates the
    windows it runs, the bound does not count on them). Running work shares the free cores
    ``cores - background_cores`` (processor sharing): a batch demands its hardware's threads, a
    request's or a window's own work one core, and while the demands sum to D each runs at
    ``rate(D) = min(1, free cores / D)``."""

    cores: float
    background_cores: float = 0.0
    request_cpu_ms: float = 0.0
    window_cpu_ms: float = 0.0

    def __post_init__(self) -> None:
        _finite_at_least("HostModel.cores", self.cores)
        if self.cores <= 0:
            raise ValueError(f"HostModel.cores must be > 0, got {self.cores!r}")
        _finite_at_least("HostModel.background_cores", self.background_cores)
        if self.background_cores >= self.cores:
            raise ValueError(f"HostModel.background_cores must be < cores ({self.cores!r}), "
                             f"got {self.background_cores!r}")
        _finite_at_least("HostModel.request_cpu_ms", self.request_cpu_ms)
        _finite_at_least("HostModel.window_cpu_ms", self.window_cpu_ms)

    @property
    def free_cores(self) -> float:
        return self.cores - self.background_cores

    def rate(self, demand: float) -> float:
        return min(1.0, self.free_cores / demand) if demand > 0 else 1.0

    def per_request_ms(self, windows: float) -> float:
        """CPU ms one request takes beyond the models' when it makes ``windows`` windows of its own
        (the sum of its stages' visit ratios at windows of one item)."""
        return host_ms_per_request(self.request_cpu_ms, self.window_cpu_ms, windows)

    def colocated_cores(self, rate_qps: float, windows: float) -> float:
        """Cores the co-located processes and the workers' own work keep busy at ``rate_qps``
        pipeline requests per second, each making ``windows`` windows (:meth:`per_request_ms`)."""
        return self.background_cores + rate_qps * self.per_request_ms(windows) / 1000.0


@dataclass(frozen=True)
class ServiceTime:
    """A batch's run time: the profiled l(b) times a random factor of mean 1.

    ``deterministic``: exactly l(b) (the profile's high percentile, what the agents predict with).
    ``exponential``: an exponential of mean l(b). ``lognormal``: mean l(b), coefficient of variation
    ``cv``; with ``cv_by_ms`` ((profiled ms, cv) points, ascending) the cv depends on how long the
    batch runs, interpolated in log-log between the points and flat beyond them (a calibration
    measures them: a 4 ms batch varies far more, relatively, than a 100 ms one). Drop and batch decisions
    predict with the worker's own predictor, which learns from the runs drawn
    (``slipstream.planner.sim.groups.Latency``); they cannot know the draw.

    ``slowdown`` (mean 1): the machine's pace over time, one factor per ``slowdown_window_s``. Every
    batch that starts in a window is multiplied by that window's factor, drawn at random from
    ``slowdown`` (a calibration measures them): slow seconds slow every stage at once, as contention
    from other processes does, which independent per-batch draws cannot.

    ``dispatch``: the worker's own time per batch on top of the model's, from the moment a batch could
    start (its last item fetched and the replica free) to the model starting it: taking the window,
    decoding, the hand-off to the model thread, the previous window's produce and acks. It holds the
    replica like service does (a calibration measures it; zero by default).

    ``by_variant``: each variant@hardware's own spread, ``(key, cv points)`` with points as in
    ``cv_by_ms`` (one point: the same cv at every length). How much a batch varies is a property of
    the code that runs it more than of its length (a Python image resize varies by 0.3-0.6, an ONNX
    classifier by 0.05-0.2 at the same length on the same machine), so a variant with its own spread
    is drawn, and predicted, with it (:meth:`for_variant`); ``cv`` and ``cv_by_ms`` are for the rest.
    """

    kind: str = "deterministic"
    cv: float = 0.0
    slowdown: tuple[float, ...] = ()
    slowdown_window_s: float = 1.0
    dispatch: Transit = Transit()
    cv_by_ms: tuple[tuple[float, float], ...] = ()  # (): the same cv for every batch
    by_variant: tuple[tuple[str, tuple[tuple[float, float], ...]], ...] = ()  # variant@hardware -> cv points
    timeline: tuple[float, ...] = ()  # window i's pace, in time order from 0 (a run's own); () = drawn
    timelines: tuple[tuple[str, tuple[float, ...]], ...] = ()  # variant@hardware -> its own timeline

    def __post_init__(self) -> None:
        if self.kind not in SERVICE_KINDS:
            raise ValueError(f"ServiceTime.kind must be one of {SERVICE_KINDS}, got {self.kind!r}")
        _finite_at_least("ServiceTime.cv", self.cv)
        if (self.kind == "lognormal") != (self.cv > 0):
            raise ValueError(f"ServiceTime.cv must be > 0 exactly for kind 'lognormal' "
                             f"(kind {self.kind!r}, cv {self.cv!r})")
        for name, seq in (("slowdown", self.slowdown), ("timeline", self.timeline),
                          *((f"timelines[{k!r}]", t) for k, t in self.timelines)):
            for i, v in enumerate(seq):
                _finite_at_least(f"ServiceTime.{name}[{i}]", v)
        if not (self.slowdown_window_s > 0 and math.isfinite(self.slowdown_window_s)):
            raise ValueError(f"ServiceTime.slowdown_window_s must be > 0, got {self.slowdown_window_s!r}")
        for i, (ms, cv) in enumerate(self.cv_by_ms):
            if not (ms > 0 and cv > 0 and math.isfinite(ms) and math.isfinite(cv)):
                raise ValueError(f"ServiceTime.cv_by_ms[{i}] must be (ms > 0, cv > 0), got {(ms, cv)!r}")
        if [p[0] for p in self.cv_by_ms] != sorted({p[0] for p in self.cv_by_ms}):
            raise ValueError(f"ServiceTime.cv_by_ms must be in ascending ms, got {self.cv_by_ms!r}")
        for name, points in self.by_variant:
            if self.kind != "lognormal":
                raise ValueError(f"ServiceTime.by_variant needs kind 'lognormal' (a spread to vary), got {self.kind!r}")
            if not points:
                raise ValueError(f"ServiceTime.by_variant[{name!r}] has no (ms, cv) point")
            try:
                ServiceTime("lognormal", points[0][1], cv_by_ms=tuple(points))
            except ValueError as exc:
                raise ValueError(f"ServiceTime.by_variant[{name!r}]: {exc}") from None

    def for_variant(self, key: str) -> "ServiceTime":
        """The service time of the variant@hardware ``key``: its own spread where ``by_variant`` has
        one and its own ``timeline`` where ``timelines`` has one (everything else as here), else this one."""
        own = dict(self.timelines).get(key)
        for name, points in self.by_variant:
            if name == key:
                return replace(self, cv=points[0][1], cv_by_ms=tuple(points), by_variant=(), timelines=(),
                               timeline=own or self.timeline)
        return replace(self, timeline=own, timelines=()) if own else self

    def cv_at(self, ms):
        """The lognormal's coefficient of variation for batches whose profiled latency is ``ms`` (a
        number or an array)."""
        if not self.cv_by_ms:
            return self.cv if np.ndim(ms) == 0 else np.full(np.shape(ms), self.cv)
        at, cv = np.log(np.array(self.cv_by_ms)).T
        return np.exp(np.interp(np.log(np.maximum(ms, 1e-9)), at, cv))

    def _log_sd(self, ms):
        return np.sqrt(np.log1p(self.cv_at(ms) ** 2))

    @property
    def is_deterministic(self) -> bool:
        return self.kind == "deterministic" and not self.slowdown and not self.timeline and not self.timelines

    @property
    def has_dispatch(self) -> bool:
        return not (self.dispatch.is_constant and self.dispatch.mean_ms == 0)

    def pace(self, rng: np.random.Generator):
        """``factor(now_ns, base_ns, spread)`` of a run whose profiled latency is ``base_ns``: a slowdown
        window's factor (drawn once per window) times a per-batch draw (:meth:`factors`) with the
        spread of ``spread`` (the variant's :meth:`for_variant`; None: this one's)."""
        window_ns = int(self.slowdown_window_s * 1e9)
        paces: dict[int, float] = {}
        slow = np.asarray(self.slowdown or (1.0,), dtype=float)
        timeline = self.timeline
        within = iter(())
        lognormal = self.kind == "lognormal"
        # (base_ns, id(spread)) -> (log-sd, -log-sd^2 / 2, spread): holding the spread keeps its id unique
        sd: dict[tuple[int, int], tuple] = {}

        def factor(now: int, base_ns: int, spread: "ServiceTime | None" = None) -> float:
            nonlocal within
            w = now // window_ns
            own = spread.timeline if spread is not None else timeline
            if w < len(own):
                m = own[w]
            elif (m := paces.get(w)) is None:
                m = paces[w] = float(rng.choice(slow))
            z = next(within, None)
            if z is None:
                within = iter((rng.standard_normal(4096) if lognormal else self.factors(rng, 4096)).tolist())
                z = next(within)
            if not lognormal:
                return m * z
            k = (base_ns, id(spread))
            s = sd.get(k)
            if s is None:
                v = float((spread or self)._log_sd(base_ns / NS_PER_MS))
                s = sd[k] = (v, -v * v / 2, spread)
            return m * math.exp(s[1] + s[0] * z)

        return factor

    def factors(self, rng: np.random.Generator, n: int, ms: np.ndarray | None = None) -> np.ndarray:
        """``n`` per-batch factors of mean 1 (for batches of profiled latency ``ms``, one each)."""
        if self.kind == "exponential":
            return rng.exponential(1.0, n)
        if self.kind == "lognormal":
            if ms is None or not self.cv_by_ms:
                s2 = math.log1p(self.cv ** 2)
                return np.exp(rng.normal(-s2 / 2, math.sqrt(s2), n))
            sd = self._log_sd(np.asarray(ms, dtype=float))
            return np.exp(-sd * sd / 2 + sd * rng.standard_normal(n))
        return np.ones(n)
