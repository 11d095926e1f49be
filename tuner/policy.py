"""The tuner's scaling policy: pure functions from frozen dataclasses to a decision (InferLine Alg. 3/4).

``decide(live, planned, state, now_ns, config) -> (ScaleDecision, TunerState)`` is composed of steps
that are tested alone: :func:`exceeding_window` (does the live envelope exceed the planned one?),
:func:`replicas_for_rate` (the replica formula), :func:`scale_up_targets`, :func:`scale_down_targets`
and :func:`bounded`.

Formulas (s_m = visit ratio, mu_m = single-replica throughput at the planned batch, R_m = planned
replicas, lambda = the sample trace's mean rate, r_i^plan = the sample envelope at window i):

- provisioning ratio ``rho_m = lambda * s_m / (mu_m * R_m)`` (InferLine's "lambda / mu" read so that
  the planned rate reproduces the planned replica count: ``ceil(lambda s_m / (mu_m rho_m)) = R_m``).
- **scale up**, the moment any live window rate exceeds its planned rate:
  ``k_m = ceil(r * s_m / (mu_m * rho_{m,i}))``, maximised over the exceeding windows i. With
  ``rho_mode="per-window"`` (default) ``rho_{m,i} = r_i^plan s_m / (mu_m R_m)``, so the planned
  envelope reproduces R_m at *every* window and k_m = ceil(R_m * r_i / r_i^plan); with
  ``rho_mode="mean"`` (InferLine read literally) ``rho_{m,i} = rho_m``, which asks for
  ``R_m * r_i / lambda`` replicas and so multiplies replicas by the short window's peak-to-mean ratio
  on the smallest excess at a short window.
- **scale down**, only after ``quiet_factor x activation_s`` since the last change (up or down):
  ``lambda_new`` = the peak ``down_window_s`` (5 s) rate over the last ``down_horizon_s`` (30 s) and
  ``k_m = ceil(lambda_new * s_m / (mu_m * rho_min))`` with ``rho_min = min_m rho_m`` (most
  conservative); never below what a scale-up would ask for right now (no flapping).

Deviation, written down: the envelope a live rate is compared with is the planned envelope scaled by
the capacity now running relative to the plan, ``c = min_m replicas_m / R_m``. At the planned counts
``c = 1`` (InferLine exactly); after a scale-down it lets traffic that returns towards the planned
level scale back up, which the paper's fixed comparison would miss.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Mapping

import numpy as np

from tuner.envelope import EnvelopeSnapshot, EnvelopeTracker, envelope

NS_PER_S = 1_000_000_000
_EPS = 1e-9  # ceil(R * (1 + rounding)) must stay R


@dataclass(frozen=True)
class StagePlan:
    """What the planner hands the tuner for one stage."""

    stage: str
    replicas: int  # R_m, planned
    mu_qps: float  # single-replica throughput at the planned variant/hardware/batch
    visit_ratio: float  # s_m: items reaching the stage per pipeline request

    def __post_init__(self) -> None:
        if self.replicas < 1 or not self.mu_qps > 0 or self.visit_ratio < 0:
            raise ValueError(f"stage {self.stage!r}: need replicas >= 1, mu_qps > 0, visit_ratio >= 0; "
                             f"got {self.replicas}, {self.mu_qps}, {self.visit_ratio}")


@dataclass(frozen=True)
class TunerPlan:
    """The planned (sample) envelope and the per-stage numbers the formulas need."""

    envelope: EnvelopeSnapshot
    mean_rate_qps: float  # lambda of the sample trace
    stages: tuple[StagePlan, ...]

    def __post_init__(self) -> None:
        if not self.mean_rate_qps > 0:
            raise ValueError(f"mean_rate_qps must be > 0, got {self.mean_rate_qps}")
        if not self.stages:
            raise ValueError("a tuner plan needs at least one stage")

    @classmethod
    def from_sample(cls, arrivals_s, windows_s, stages: tuple[StagePlan, ...]) -> "TunerPlan":
        """The planned envelope and mean rate of a sample trace (arrival times in seconds)."""
        arr = np.sort(np.asarray(arrivals_s, dtype=np.float64))
        if arr.size < 2 or arr[-1] <= arr[0]:
            raise ValueError("a sample trace needs at least two distinct arrival times")
        rates = envelope(arr, windows_s)
        snap = EnvelopeSnapshot(tuple(float(w) for w in windows_s), tuple(float(r) for r in rates))
        return cls(snap, float(arr.size / (arr[-1] - arr[0])), tuple(stages))

    def rho(self, stage: StagePlan, rate_qps: float | None = None) -> float:
        """Provisioning ratio that maps ``rate_qps`` (default: the mean rate) to the planned count."""
        rate = self.mean_rate_qps if rate_qps is None else rate_qps
        return rate * stage.visit_ratio / (stage.mu_qps * stage.replicas)

    @property
    def rho_min(self) -> float:
        return min(self.rho(s) for s in self.stages if s.visit_ratio > 0)

    @property
    def planned_replicas(self) -> dict[str, int]:
        return {s.stage: s.replicas for s in self.stages}


@dataclass(frozen=True)
class TunerConfig:
    activation_s: float = 5.0  # measured: worker start + rebalance (slipstream bench tuner)
    quiet_factor: float = 3.0  # scale down only after quiet_factor x activation_s without a change
    down_window_s: float = 5.0
    down_horizon_s: float = 30.0
    up_horizon_s: float = 1.0  # live envelope for scale-up: windows ending in the last second
    rho_mode: str = "per-window"  # per-window | mean
    min_replicas: int = 1
    max_replicas: int = 64

    def __post_init__(self) -> None:
        if self.rho_mode not in ("per-window", "mean"):
            raise ValueError(f"rho_mode must be 'per-window' or 'mean', got {self.rho_mode!r}")
        if not (self.activation_s >= 0 and self.quiet_factor >= 0 and self.down_window_s > 0
                and self.down_horizon_s > 0 and self.up_horizon_s > 0):
            raise ValueError(f"invalid tuner config: {self}")
        if not 1 <= self.min_replicas <= self.max_replicas:
            raise ValueError(f"need 1 <= min_replicas <= max_replicas, got "
                             f"{self.min_replicas}, {self.max_replicas}")

    @property
    def quiet_ns(self) -> int:
        return int(self.quiet_factor * self.activation_s * NS_PER_S)


@dataclass(frozen=True)
class LiveTraffic:
    """What the policy reads of the live traffic (built by the service from the tracker)."""

    envelope: EnvelopeSnapshot  # recent maxima over up_horizon_s, same windows as the plan
    down_rate_qps: float  # peak down_window_s rate over the last down_horizon_s


@dataclass(frozen=True)
class TunerState:
    replicas: Mapping[str, int]
    last_change_ns: int  # InferLine's LastUpdate; also reset by a scale-down

    @classmethod
    def initial(cls, plan: TunerPlan, now_ns: int) -> "TunerState":
        return cls(replicas=plan.planned_replicas, last_change_ns=now_ns)


@dataclass(frozen=True)
class StageChange:
    stage: str
    previous: int
    replicas: int
    reason: str  # scale-up | scale-down
    window_s: float | None
    live_rate_qps: float
    planned_rate_qps: float | None


@dataclass(frozen=True)
class ScaleDecision:
    targets: Mapping[str, int]
    changes: tuple[StageChange, ...] = ()
    trigger: "Trigger | None" = None
    note: str = ""  # why nothing changed, for logs and --dry-run


@dataclass(frozen=True)
class Trigger:
    window_s: float
    live_rate_qps: float
    planned_rate_qps: float  # the (capacity-scaled) planned rate it exceeded
    scale: float = field(default=1.0)  # the capacity factor c applied to the planned envelope


def tracker_windows(plan: TunerPlan, config: "TunerConfig") -> tuple[float, ...]:
    """The windows a live tracker must keep: the plan's plus the scale-down window."""
    return tuple(sorted(set(plan.envelope.windows_s) | {config.down_window_s}))


def observe(tracker: EnvelopeTracker, plan: TunerPlan, now_ns: int, config: "TunerConfig") -> LiveTraffic:
    """Read what the policy needs out of a live tracker built with :func:`tracker_windows`."""
    up = tracker.recent(now_ns, config.up_horizon_s)
    down = tracker.recent(now_ns, config.down_horizon_s)
    env = EnvelopeSnapshot(plan.envelope.windows_s, tuple(up.rate(w) for w in plan.envelope.windows_s))
    return LiveTraffic(env, down.rate(config.down_window_s))


# ---- steps


def capacity_factor(plan: TunerPlan, replicas: Mapping[str, int]) -> float:
    """c = min over stages of running / planned replicas (1.0 at the planned counts)."""
    return min(replicas.get(s.stage, s.replicas) / s.replicas for s in plan.stages)


def exceeding_windows(live: EnvelopeSnapshot, planned: EnvelopeSnapshot,
                      scale: float = 1.0) -> list[Trigger]:
    """Every window whose live rate exceeds ``scale`` x the planned rate at the same window."""
    if live.windows_s != planned.windows_s:
        raise ValueError(f"live windows {live.windows_s} differ from planned {planned.windows_s}")
    return [Trigger(w, r, p * scale, scale)
            for w, r, p in zip(live.windows_s, live.rates_qps, planned.rates_qps) if r > p * scale]


def replicas_for_rate(rate_qps: float, stage: StagePlan, rho: float) -> int:
    """ceil(rate * s_m / (mu_m * rho)), with a tolerance so the planned rate gives exactly R_m."""
    if stage.visit_ratio == 0:
        return 0
    return max(0, math.ceil(rate_qps * stage.visit_ratio / (stage.mu_qps * rho) - _EPS))


def up_target(plan: TunerPlan, stage: StagePlan, triggers: list[Trigger], rho_mode: str) -> int:
    """The largest replica count any exceeding window asks for (0 when none exceeds)."""
    best = 0
    for t in triggers:
        rate_planned = plan.envelope.rate(t.window_s)
        if rho_mode == "per-window" and rate_planned > 0:
            rho = plan.rho(stage, rate_planned)
        else:
            rho = plan.rho(stage)
        best = max(best, replicas_for_rate(t.live_rate_qps, stage, rho))
    return best


def scale_up_targets(plan: TunerPlan, current: Mapping[str, int], triggers: list[Trigger],
                     rho_mode: str) -> dict[str, int]:
    """Add only: max(current, k_m)."""
    return {s.stage: max(current[s.stage], up_target(plan, s, triggers, rho_mode)) for s in plan.stages}


def scale_down_targets(plan: TunerPlan, current: Mapping[str, int], down_rate_qps: float,
                       floor: Mapping[str, int]) -> dict[str, int]:
    """Remove only: min(current, max(k_m at rho_min, floor))."""
    rho_min = plan.rho_min
    return {s.stage: min(current[s.stage],
                         max(replicas_for_rate(down_rate_qps, s, rho_min), floor.get(s.stage, 0)))
            for s in plan.stages}


def bounded(targets: Mapping[str, int], config: TunerConfig) -> dict[str, int]:
    return {k: min(config.max_replicas, max(config.min_replicas, v)) for k, v in targets.items()}


def _changes(before: Mapping[str, int], after: Mapping[str, int], reason: str,
             trigger: Trigger | None, live_rate: float) -> tuple[StageChange, ...]:
    return tuple(
        StageChange(stage, before[stage], n, reason,
                    trigger.window_s if trigger else None, live_rate,
                    trigger.planned_rate_qps if trigger else None)
        for stage, n in after.items() if n != before[stage])


# ---- the policy


def decide(live: LiveTraffic, planned: TunerPlan, state: TunerState, now_ns: int,
           config: TunerConfig = TunerConfig()) -> tuple[ScaleDecision, TunerState]:
    """Up fast (this call), down slow (after the quiet period); see the module docstring."""
    current = {s.stage: state.replicas.get(s.stage, s.replicas) for s in planned.stages}
    c = capacity_factor(planned, current)
    triggers = exceeding_windows(live.envelope, planned.envelope, c)
    up = bounded(scale_up_targets(planned, current, triggers, config.rho_mode), config)
    if up != current:
        # report the window that asks for the most replicas (largest excess ratio)
        top = max(triggers, key=lambda t: t.live_rate_qps / max(t.planned_rate_qps, 1e-12))
        changes = _changes(current, up, "scale-up", top, top.live_rate_qps)
        return (ScaleDecision(up, changes, top),
                replace(state, replicas=up, last_change_ns=now_ns))

    quiet_for = now_ns - state.last_change_ns
    if quiet_for < config.quiet_ns:
        return ScaleDecision(current, note=f"hold: quiet {quiet_for / NS_PER_S:.1f}s of "
                                           f"{config.quiet_ns / NS_PER_S:.1f}s"), state
    # never go below what the live envelope would scale straight back up to
    floor = scale_up_targets(planned, {k: 0 for k in current},
                             exceeding_windows(live.envelope, planned.envelope, 1.0), config.rho_mode)
    down = bounded(scale_down_targets(planned, current, live.down_rate_qps, floor), config)
    down = {k: min(v, current[k]) for k, v in down.items()}  # bounds never turn a down into an up
    if down == current:
        return ScaleDecision(current, note="steady"), state
    changes = _changes(current, down, "scale-down", None, live.down_rate_qps)
    return ScaleDecision(down, changes), replace(state, replicas=down, last_change_ns=now_ns)
