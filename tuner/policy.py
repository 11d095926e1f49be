"""The tuner's scaling policy: pure functions from frozen dataclasses to a decision (InferLine Alg. 3/4).

``decide(live, planned, state, now_ns, config) -> (ScaleDecision, TunerState)`` is composed of steps
that are tested alone: :func:`demand` (the replica formula at one window), :func:`stage_up_target`
(which windows trigger, and what they ask for), :func:`down_target` and :func:`bounded`.

Formulas (s_m = visit ratio, mu_m = single-replica throughput at the planned batch, R_m = planned
replicas, n_m = replicas running now, r_i = the live envelope at window w_i; what the planned
replicas are sized for, :meth:`TunerPlan.sized_envelope` and :meth:`TunerPlan.sized_rate`: with the
hand-off's capacity (docs/tuner.md, "What the plan can serve") r_i^plan = the rate they serve within
the SLO of a burst seen over w_i that lasts as long again (the capacity at 2 w_i) and lambda = the
rate they keep up with, and no noise slack (a computed bound); without it, r_i^plan = the sample
envelope and lambda = the planned rate):

- provisioning ratio ``rho_m = lambda * s_m / (mu_m * R_m)`` (InferLine's "lambda / mu" read so that
  the planned rate reproduces the planned replica count: ``ceil(lambda s_m / (mu_m rho_m)) = R_m``).
- replicas asked for by window i: ``k_{m,i} = ceil(r_i * s_m / (mu_m * rho_{m,i}))``. With
  ``rho_mode="per-window"`` (default) ``rho_{m,i} = r_i^plan s_m / (mu_m R_m)``, so the planned
  envelope reproduces R_m at *every* window and ``k_{m,i} = ceil(R_m r_i / r_i^plan)``. With
  ``rho_mode="mean"`` (the paper read literally) ``rho_{m,i} = rho_m`` and ``k = ceil(R_m r_i / lambda)``,
  which multiplies replicas by a short window's peak-to-mean ratio on the smallest excess there.
- **scale up** (at once): window i triggers stage m when its live count exceeds the count the running
  replicas are sized for, ``c = r_i^plan w_i n_m / R_m``, by more than ``up_slack_sigma * sqrt(c)``
  (Poisson noise: the max of many live windows otherwise creeps over the sample's max and adds
  replicas to steady traffic); the target is ``max(n_m, max_i k_{m,i})`` over triggering windows.
  At ``n_m = R_m`` and zero slack this is InferLine's Algorithm 3; scaling ``c`` by ``n_m / R_m``
  lets traffic that returns after a scale-down scale back up, which the paper's fixed test misses.
- **pace**: each stage's capacity is divided by its pace p_m (``slipstream.tuner.pace``: the workers' batches
  against the service times the capacity assumed, at least 1), so on a machine running p_m times
  slower than calibrated r_i^plan and lambda are what the replicas serve there (:meth:`TunerPlan.at_pace`).
- **scale down** (slowly): only after ``quiet_factor x activation_s`` since the last change (up or
  down). ``lambda_new`` = peak ``down_window_s`` (5 s) rate over the last ``down_horizon_s`` (30 s),
  ``k_m = max(R_m, ceil(lambda_new * s_m / (mu_m * rho_m)))`` with the stage's own ``rho_m``, so
  traffic back at the planned rate gives back the planned count ``R_m``, and never less: going below
  the plan is the planner's call, made on its re-planning interval (InferLine's ``rho_min = min_m rho_m`` keeps
  every stage but the tightest above its plan for good: the demo's replicas would never come down), raised
  to what the envelope of the last ``down_horizon_s`` would scale straight back up to from ``k_m`` (no
  flapping), and never above ``n_m``.
- **bounds**: targets stay within ``[min_replicas, max_replicas]``; what the envelope asked beyond
  ``max_replicas`` is reported (``ScaleDecision.short``: the service logs it and sets a gauge), since
  requests past that capacity end as early drops.
- **accuracy scaling** (Loki: hardware first, then accuracy), for a stage whose hand-off has a ladder
  (``slipstream.tuner.ladder``): after the replicas, :func:`stage_shares` moves routing shares to cheaper
  variants at once when the shares in force do not cover the live envelope on the target replicas,
  the least accuracy that covers it; and back towards the plan's only after the quiet period, as far
  as the envelope of the last ``down_horizon_s`` allows at the highest pace of that horizon (so the
  next tick does not move them down again). A stage that the shares cover is not reported short.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field, replace
from typing import Mapping

import numpy as np

from .envelope import EnvelopeSnapshot, EnvelopeTracker, envelope
from .ladder import Rung, accuracy, covering_shares, mix_load

NS_PER_S = 1_000_000_000
_EPS = 1e-9  # ceil(R * (1 + rounding)) must stay R


@dataclass(frozen=True)
class StageSizing:
    """What the planner hands the tuner for one stage (a ``StageHandoff`` with its ``StageCapacity`` of
    the TunerHandoff record): the numbers the scaling formulas size its replicas by.

    Not the planner's ``StagePlan`` (``slipstream.planner.plan``), which says what a stage runs (its
    assignments of variant, hardware, max batch and replicas, and its partitions). This says how much
    the planned replicas serve: R_m, mu_m, s_m and the capacity. The tuner reads it from the
    hand-off record, never from the planner's code, so the two stay separate types."""

    stage: str
    replicas: int  # R_m, planned
    mu_qps: float  # single-replica throughput at the planned variant/hardware/batch
    visit_ratio: float  # s_m: items reaching the stage per pipeline request
    # what the planned replicas serve (the hand-off's capacity; empty: unknown, size to the sample):
    capacity_qps: float = 0.0  # the rate they keep up with, pipeline requests/s
    window_capacity_qps: tuple[float, ...] = ()  # per plan window: the most req/s within it served within the SLO
    variant: str = ""  # what the capacity is for, and the batch service time it assumes, per
    service_ms: tuple[float, ...] = ()  # batch size 1..max batch (the workers' pace is measured against it)
    ladder: tuple[Rung, ...] = ()  # loki: the variants the pool keeps loaded, with the plan's shares

    def __post_init__(self) -> None:
        if self.replicas < 1 or not self.mu_qps > 0 or self.visit_ratio < 0:
            raise ValueError(f"stage {self.stage!r}: need replicas >= 1, mu_qps > 0, visit_ratio >= 0; "
                             f"got {self.replicas}, {self.mu_qps}, {self.visit_ratio}")
        if self.window_capacity_qps and (not self.capacity_qps > 0 or min(self.window_capacity_qps) < 0):
            raise ValueError(f"stage {self.stage!r}: a capacity needs capacity_qps > 0 and window capacities "
                             f">= 0; got {self.capacity_qps}, {self.window_capacity_qps}")
        names = [r.variant for r in self.ladder]
        if self.ladder and (len(set(names)) < len(names) or not sum(r.share for r in self.ladder) > 0):
            raise ValueError(f"stage {self.stage!r}: a ladder needs distinct variants and shares summing "
                             f"to more than 0; got {[(r.variant, r.share) for r in self.ladder]}")

    @property
    def planned_shares(self) -> dict[str, float]:
        """The plan's routing shares over the ladder (empty without one)."""
        return {r.variant: r.share for r in self.ladder}


@dataclass(frozen=True)
class TunerPlan:
    """The planned (sample) envelope and the per-stage numbers the formulas need."""

    envelope: EnvelopeSnapshot
    mean_rate_qps: float  # lambda of the sample trace
    stages: tuple[StageSizing, ...]

    def __post_init__(self) -> None:
        if not self.mean_rate_qps > 0:
            raise ValueError(f"mean_rate_qps must be > 0, got {self.mean_rate_qps}")
        if not self.stages:
            raise ValueError("a tuner plan needs at least one stage")
        n = len(self.envelope.windows_s)
        odd = [s.stage for s in self.stages if s.window_capacity_qps and len(s.window_capacity_qps) != n
               or any(r.window_qps and len(r.window_qps) != n for r in s.ladder)]
        if odd:
            raise ValueError(f"stages {odd}: window capacities must be one per plan window ({n})")

    @classmethod
    def from_sample(cls, arrivals_s, windows_s, stages: tuple[StageSizing, ...]) -> "TunerPlan":
        """The planned envelope and mean rate of a sample trace (arrival times in seconds)."""
        arr = np.sort(np.asarray(arrivals_s, dtype=np.float64))
        if arr.size < 2 or arr[-1] <= arr[0]:
            raise ValueError("a sample trace needs at least two distinct arrival times")
        rates = envelope(arr, windows_s)
        snap = EnvelopeSnapshot(tuple(float(w) for w in windows_s), tuple(float(r) for r in rates))
        return cls(snap, float(arr.size / (arr[-1] - arr[0])), tuple(stages))

    def rho(self, stage: StageSizing, rate_qps: float | None = None) -> float:
        """Provisioning ratio that maps ``rate_qps`` (default: :meth:`sized_rate`) to the planned count."""
        rate = self.sized_rate(stage) if rate_qps is None else rate_qps
        return rate * stage.visit_ratio / (stage.mu_qps * stage.replicas)

    def sized_rate(self, stage: StageSizing) -> float:
        """The rate the planned replicas are sized for: their capacity when the hand-off says it,
        else the planned rate lambda."""
        return stage.capacity_qps if stage.window_capacity_qps else self.mean_rate_qps

    def sized_envelope(self, stage: StageSizing) -> tuple[float, ...]:
        """Per plan window w_i, the rate the planned replicas are sized for. With the hand-off's
        capacity: what they serve within the SLO of a burst that lasts as long again (the capacity
        at the first plan window >= 2 w_i, the last beyond it): the tuner sees an excess only once
        it has come, and the replicas it adds serve later. Without: the sample's envelope
        (InferLine's r_i^plan)."""
        if not stage.window_capacity_qps:
            return self.envelope.rates_qps
        return tuple(stage.window_capacity_qps[j] for j in self.sized_index())

    def sized_index(self) -> tuple[int, ...]:
        """Per plan window w_i, the plan window whose capacity sizes it: the first >= 2 w_i (the last
        beyond the grid); :meth:`sized_envelope`, and the ladder's rungs (``slipstream.tuner.ladder``)."""
        ws = self.envelope.windows_s
        return tuple(min(bisect.bisect_left(ws, 2 * w * (1 - _EPS)), len(ws) - 1) for w in ws)

    def at_pace(self, pace: Mapping[str, float]) -> "TunerPlan":
        """This plan with each stage's capacity divided by its pace (``slipstream.tuner.pace``: how much longer
        its batches take than the capacity assumed); stages without a capacity, or not in ``pace``,
        as they are."""
        if not pace:
            return self
        return replace(self, stages=tuple(
            replace(s, capacity_qps=s.capacity_qps / pace[s.stage],
                    window_capacity_qps=tuple(x / pace[s.stage] for x in s.window_capacity_qps),
                    ladder=tuple(replace(r, rate_qps=r.rate_qps / pace[s.stage],
                                         window_qps=tuple(x / pace[s.stage] for x in r.window_qps))
                                 for r in s.ladder))
            if s.window_capacity_qps and pace.get(s.stage, 1.0) != 1.0 else s for s in self.stages))

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
    up_slack_sigma: float = 1.0  # a window triggers only beyond sized-for count + sigma*sqrt(count)
    rho_mode: str = "per-window"  # per-window | mean
    min_replicas: int = 1
    max_replicas: int = 64
    share_step: float = 0.05  # routing shares move in multiples of this (slipstream.tuner.ladder)
    share_headroom: float = 0.1  # shares that move cover the envelope times 1 + this (stage_shares)

    def __post_init__(self) -> None:
        if not (0 < self.share_step <= 1 and self.share_headroom >= 0):
            raise ValueError(f"need 0 < share_step <= 1 and share_headroom >= 0, got "
                             f"{self.share_step!r}, {self.share_headroom!r}")
        if self.rho_mode not in ("per-window", "mean"):
            raise ValueError(f"rho_mode must be 'per-window' or 'mean', got {self.rho_mode!r}")
        if not (self.activation_s >= 0 and self.quiet_factor >= 0 and self.down_window_s > 0
                and self.down_horizon_s > 0 and self.up_horizon_s > 0 and self.up_slack_sigma >= 0):
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

    envelope: EnvelopeSnapshot  # maxima over windows ending in the last up_horizon_s (plan's windows)
    recent: EnvelopeSnapshot  # the same over the last down_horizon_s
    down_rate_qps: float  # peak down_window_s rate over the last down_horizon_s
    pace: Mapping[str, float] = field(default_factory=dict)  # per stage (slipstream.tuner.pace); absent: 1
    peak_pace: Mapping[str, float] = field(default_factory=dict)  # the highest over the last down_horizon_s

    def slowest(self, stage: str) -> float:
        """The stage's pace that a move back to slower variants is judged at: the highest of now and
        the last ``down_horizon_s`` (the recent envelope's horizon)."""
        return max(self.pace.get(stage, 1.0), self.peak_pace.get(stage, 1.0))


@dataclass(frozen=True)
class TunerState:
    replicas: Mapping[str, int]
    last_change_ns: int  # InferLine's LastUpdate; also reset by a scale-down and a share change
    shares: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # stages with a ladder

    @classmethod
    def initial(cls, plan: TunerPlan, now_ns: int) -> "TunerState":
        return cls(replicas=plan.planned_replicas, last_change_ns=now_ns,
                   shares={s.stage: s.planned_shares for s in plan.stages if s.ladder})


@dataclass(frozen=True)
class StageChange:
    stage: str
    previous: int
    replicas: int
    reason: str  # scale-up | scale-down
    window_s: float | None
    live_rate_qps: float
    planned_rate_qps: float | None
    pace: float = 1.0  # the stage's pace the capacity was divided by


@dataclass(frozen=True)
class ShareChange:
    stage: str
    previous: Mapping[str, float]
    shares: Mapping[str, float]
    reason: str  # accuracy-down (the live envelope exceeds the shares in force) | accuracy-up (it subsided)
    load: float  # the previous shares' load (slipstream.tuner.ladder.mix_load) against the envelope that moved them
    accuracy: tuple[float, float]  # the stage's mean accuracy before and after


@dataclass(frozen=True)
class ScaleDecision:
    targets: Mapping[str, int]
    changes: tuple[StageChange, ...] = ()
    trigger: "Trigger | None" = None
    note: str = ""  # why nothing changed, for logs and --dry-run
    short: Mapping[str, int] = field(default_factory=dict)  # stage -> replicas the envelope asks beyond max_replicas
    share_changes: tuple[ShareChange, ...] = ()


@dataclass(frozen=True)
class Trigger:
    window_s: float
    live_rate_qps: float
    planned_rate_qps: float  # the planned rate scaled to the replicas running (r_plan * n / R)


def tracker_windows(plan: TunerPlan, config: "TunerConfig") -> tuple[float, ...]:
    """The windows a live tracker must keep: the plan's plus the scale-down window."""
    return tuple(sorted(set(plan.envelope.windows_s) | {config.down_window_s}))


def observe(tracker: EnvelopeTracker, plan: TunerPlan, now_ns: int, config: "TunerConfig",
            pace: Mapping[str, float] | None = None, peak_pace: Mapping[str, float] | None = None) -> LiveTraffic:
    """Read what the policy needs out of a live tracker built with :func:`tracker_windows` (and the
    workers' ``pace`` now and its peak over ``down_horizon_s``, ``slipstream.tuner.pace``)."""
    ws = plan.envelope.windows_s
    up = tracker.recent(now_ns, config.up_horizon_s)
    down = tracker.recent(now_ns, config.down_horizon_s)
    return LiveTraffic(EnvelopeSnapshot(ws, tuple(up.rate(w) for w in ws)),
                       EnvelopeSnapshot(ws, tuple(down.rate(w) for w in ws)),
                       down.rate(config.down_window_s), dict(pace or {}), dict(peak_pace or {}))


# ---- steps


def demand(rate_qps: float, planned_qps: float, plan: TunerPlan, stage: StageSizing, rho_mode: str) -> int:
    """k_{m,i}: replicas of ``stage`` that a live ``rate_qps`` asks for at a window whose planned
    (sized-for) rate is ``planned_qps``."""
    rho = plan.rho(stage, planned_qps) if rho_mode == "per-window" and planned_qps > 0 else plan.rho(stage)
    return replicas_for_rate(rate_qps, stage, rho)


def replicas_for_rate(rate_qps: float, stage: StageSizing, rho: float) -> int:
    """ceil(rate * s_m / (mu_m * rho)), with a tolerance so the planned rate gives exactly R_m."""
    if stage.visit_ratio == 0:
        return 0
    return max(0, math.ceil(rate_qps * stage.visit_ratio / (stage.mu_qps * rho) - _EPS))


def stage_up_target(plan: TunerPlan, stage: StageSizing, running: int, live: EnvelopeSnapshot,
                    slack_sigma: float, rho_mode: str) -> tuple[int, Trigger | None]:
    """max(running, k over triggering windows) and the window that asked for the most."""
    if live.windows_s != plan.envelope.windows_s:
        raise ValueError(f"live windows {live.windows_s} differ from planned {plan.envelope.windows_s}")
    best, top = running, None
    if stage.window_capacity_qps:  # a bound computed from the plan, not a sample's noisy maximum
        slack_sigma = 0.0
    for w, r, r_plan in zip(live.windows_s, live.rates_qps, plan.sized_envelope(stage)):
        sized_for = r_plan * w * running / stage.replicas  # count the running replicas are sized for
        if r * w <= sized_for + slack_sigma * math.sqrt(sized_for):
            continue
        k = demand(r, r_plan, plan, stage, rho_mode)
        if k > best:
            best, top = k, Trigger(w, r, r_plan * running / stage.replicas)
    return best, top


def down_target(plan: TunerPlan, stage: StageSizing, running: int, live: "LiveTraffic", rho_mode: str,
                slack_sigma: float) -> int:
    """min(running, max(k at the stage's rho, the planned count, what the recent envelope would scale
    straight back up to)). Below the planned count is the planner's call (it re-plans on its interval).
    "Would scale back up" is judged by the scale-up test itself, noise margin included: with no
    margin, the max of a bursty process's shortest windows over 30 s almost always exceeds the
    sample's, and replicas would never come down."""
    k = max(replicas_for_rate(live.down_rate_qps, stage, plan.rho(stage)), stage.replicas)
    floor, _ = stage_up_target(plan, stage, k, live.recent, slack_sigma, rho_mode)
    return min(running, floor)


def bounded(targets: Mapping[str, int], config: TunerConfig) -> dict[str, int]:
    return {k: min(config.max_replicas, max(config.min_replicas, v)) for k, v in targets.items()}


def _changes(before: Mapping[str, int], after: Mapping[str, int], reason: str,
             triggers: Mapping[str, Trigger | None], live: LiveTraffic, live_rate: float) -> tuple[StageChange, ...]:
    out = []
    for stage, n in after.items():
        if n == before[stage]:
            continue
        t = triggers.get(stage)
        out.append(StageChange(stage, before[stage], n, reason, t.window_s if t else None,
                               t.live_rate_qps if t else live_rate, t.planned_rate_qps if t else None,
                               live.pace.get(stage, 1.0)))
    return tuple(out)


def stage_shares(plan: TunerPlan, stage: StageSizing, shares: Mapping[str, float], replicas: int,
                 live: LiveTraffic, quiet: bool, config: TunerConfig, slowest: StageSizing | None = None
                 ) -> ShareChange | None:
    """Loki's accuracy scaling in the fast loop, for a stage with a ladder running ``shares`` on
    ``replicas`` replicas (``stage`` at the live pace): when the shares do not cover the live envelope
    (``slipstream.tuner.ladder.mix_load`` > 1), at once the shares that give up the least accuracy
    below the plan's and cover it (``slipstream.tuner.ladder.covering_shares``); else, once ``quiet``,
    those that cover the envelope of the last ``down_horizon_s`` on ``slowest`` (the stage at
    :meth:`LiveTraffic.slowest`, the highest pace of the same horizon; default ``stage``) when they are
    more accurate than ``shares`` (back towards the plan's as the burst ages out of it; at the pace of
    the moment they followed its dips and flapped, docs/tuner.md "When"). Shares that move cover the
    envelope times ``1 + share_headroom``: at a step the envelope's longer windows fill over seconds,
    and the queue built meanwhile drains in the slack (in the simulated step of
    ``tests/unit/loadgen/test_simulate_shares.py``, 98.3-99.5 % of the SLO met without it, 99.5-100 %
    with 0.1, for 0.001 of mean accuracy); moving back, the live envelope then stays below what they
    cover by as much: no flapping. None: keep ``shares``."""
    index, ladder, planned = plan.sized_index(), stage.ladder, stage.planned_shares
    before, slack = accuracy(shares, ladder), 1 + config.share_headroom
    load = mix_load(shares, ladder, live.envelope.rates_qps, index, replicas)
    if load > 1 + _EPS:
        new = covering_shares(ladder, planned, [r * slack for r in live.envelope.rates_qps], index, replicas,
                              config.share_step)
        reason = "accuracy-down"
    elif quiet:
        slow = (slowest or stage).ladder
        new = covering_shares(slow, planned, [r * slack for r in live.recent.rates_qps], index, replicas,
                              config.share_step)
        load = mix_load(shares, slow, live.recent.rates_qps, index, replicas)
        if accuracy(new, ladder) <= before + _EPS:
            return None
        reason = "accuracy-up"
    else:
        return None
    if all(abs(new.get(v, 0.0) - shares.get(v, 0.0)) <= _EPS for v in {*new, *shares}):
        return None
    return ShareChange(stage.stage, dict(shares), new, reason, load, (before, accuracy(new, ladder)))


# ---- the policy


def decide(live: LiveTraffic, planned: TunerPlan, state: TunerState, now_ns: int,
           config: TunerConfig = TunerConfig()) -> tuple[ScaleDecision, TunerState]:
    """Up fast (this call), down slow (after the quiet period), then the stages' shares; see the
    module docstring."""
    slowest = planned.at_pace({s.stage: live.slowest(s.stage) for s in planned.stages})
    planned = planned.at_pace(live.pace)
    decision, after = _replicas(live, planned, state, now_ns, config)
    quiet = after.last_change_ns == state.last_change_ns and now_ns - state.last_change_ns >= config.quiet_ns
    moves = [c for s, slow in zip(planned.stages, slowest.stages) if s.ladder and s.stage in state.shares
             if (c := stage_shares(planned, s, state.shares[s.stage], decision.targets[s.stage], live, quiet,
                                   config, slow)) is not None]
    shares = {**state.shares, **{c.stage: c.shares for c in moves}}
    covered = {s.stage for s in planned.stages if s.stage in shares and mix_load(
        shares[s.stage], s.ladder, live.envelope.rates_qps, planned.sized_index(), decision.targets[s.stage])
        <= 1 + _EPS}
    decision = replace(decision, share_changes=tuple(moves),
                       short={k: n for k, n in decision.short.items() if k not in covered})
    return decision, replace(after, shares=shares, last_change_ns=now_ns if moves else after.last_change_ns)


def _replicas(live: LiveTraffic, planned: TunerPlan, state: TunerState, now_ns: int,
              config: TunerConfig) -> tuple[ScaleDecision, TunerState]:
    """The replica targets: up at once, down after the quiet period (``planned`` at the live pace)."""
    current = {s.stage: state.replicas.get(s.stage, s.replicas) for s in planned.stages}
    ups = {s.stage: stage_up_target(planned, s, current[s.stage], live.envelope,
                                    config.up_slack_sigma, config.rho_mode) for s in planned.stages}
    wanted = {k: max(current[k], v[0]) for k, v in ups.items()}
    short = {k: n for k, n in wanted.items() if n > config.max_replicas}
    up = bounded(wanted, config)
    if any(up[k] > current[k] for k in up):
        up = {k: max(up[k], current[k]) for k in up}  # bounds below a current count are not a scale-up
        triggers = {k: v[1] for k, v in ups.items()}
        top = max((v[1] for v in ups.values() if v[1] is not None),
                  key=lambda t: t.live_rate_qps / max(t.planned_rate_qps, 1e-12))
        return (ScaleDecision(up, _changes(current, up, "scale-up", triggers, live, top.live_rate_qps), top,
                              short=short), replace(state, replicas=up, last_change_ns=now_ns))

    quiet_for = now_ns - state.last_change_ns
    if quiet_for < config.quiet_ns:
        return ScaleDecision(current, note=f"hold: quiet {quiet_for / NS_PER_S:.1f}s of "
                                           f"{config.quiet_ns / NS_PER_S:.1f}s", short=short), state
    down = bounded({s.stage: down_target(planned, s, current[s.stage], live, config.rho_mode,
                                         config.up_slack_sigma)
                    for s in planned.stages}, config)
    down = {k: min(v, current[k]) for k, v in down.items()}  # bounds never turn a down into an up
    if down == current:
        return ScaleDecision(current, note="steady", short=short), state
    changes = _changes(current, down, "scale-down", {}, live, live.down_rate_qps)
    return ScaleDecision(down, changes, short=short), replace(state, replicas=down, last_change_ns=now_ns)
