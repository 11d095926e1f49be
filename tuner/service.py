"""The tuner as a service: feed arrival timestamps to the tracker, decide every ``interval_s``, actuate,
publish. The arithmetic lives in ``slipstream.tuner.policy``/``slipstream.tuner.partitions``; this shell only moves data.

Order of one scaling action (per changed stage):

1. Scale-up past the topic's partitions: grow the stage input topic first (``target_partitions``),
   so the new consumers have partitions to take. Consumers are worker processes: with
   ``replicas_per_worker`` set, replicas run inside ``slipstream.streams.placement.layout`` workers and the
   topic grows only when the worker count does (growing it is itself a rebalance).
2. Ask the actuator for the new count (in a thread: stopping a worker may wait its grace period).
3. Publish a ``StageConfig`` (the stage's latest config with the new replicas/partitions, ``reason``;
   its epoch is its offset on the control topic, the written field ``slipstream.streams.control_rules.next_epoch``) to the control topic and a ``ScalingAction`` to the scaling topic.

A share change (``slipstream.tuner.policy.stage_shares``, a stage with a ladder) is the same ``StageConfig``
with the new ``routing`` (every variant of the latest config's routing still named, so the workers
keep them loaded and apply the shares at a window boundary with no model load), published in the
tick that decided it, with the tick's replica change when there is one; it grows no partition and
has no ``ScalingAction`` (its record is the StageConfig).

The workers' pace (``slipstream.tuner.pace``) comes from the results topic's hop timings (:meth:`on_result`)
and scales the plan's capacity at every decision. Kafka I/O (where timestamps and results come from,
where records go) is injected: ``tuner.control_io`` binds it to
the broker, tests bind it to lists.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace
from typing import AsyncIterator, Awaitable, Callable, Mapping

import numpy as np

from ..schemas.records import ScalingAction, StageConfig, TunerHandoff
from ..streams import topics
from ..streams.control_rules import next_epoch
from ..streams.loops import periodically
from ..streams.placement import layout
from ..streams.spec import Pipeline
from . import planfile
from .actuators import Actuator
from .envelope import EnvelopeTracker
from .metrics import TunerMetrics
from .pace import PaceConfig, PaceTracker, expected_service
from .partitions import target_partitions
from .policy import (ScaleDecision, ShareChange, StageChange, TunerConfig, TunerPlan, TunerState, decide,
                          observe, tracker_windows)

log = logging.getLogger(__name__)

Publish = Callable[[str, str, StageConfig | ScalingAction, str], Awaitable[None]]  # (topic, record type, value, key)
GrowPartitions = Callable[[str, int], Awaitable[int]]  # (topic, count) -> count after


@dataclass(frozen=True)
class ServiceSettings:
    # a burst is seen (and answered) within one interval: deciding costs well under a millisecond
    interval_s: float = 0.1
    # hold-back for out-of-order timestamps; none for ``slipstream.streams.control_io.KafkaArrivals``, whose
    # timestamps come from successive offset snapshots and are in order by construction
    reorder_s: float = 0.0
    partition_headroom: float = 1.5
    bucket_s: float = 0.5
    replicas_per_worker: int | None = None  # at most, per worker process; None: one process per replica

    def __post_init__(self) -> None:
        if self.interval_s <= 0 or self.reorder_s < 0 or self.partition_headroom < 1 or self.bucket_s <= 0 \
                or (self.replicas_per_worker is not None and self.replicas_per_worker < 1):
            raise ValueError(f"invalid service settings: {self}")

    def consumers(self, replicas: int) -> int:
        """Consumers (worker processes) of a stage running ``replicas`` replicas."""
        per_worker = self.replicas_per_worker
        return replicas if per_worker is None else layout(replicas, per_worker).workers


def stage_config_record(pipeline: Pipeline, latest: StageConfig | None, stage: str, replicas: int,
                        partitions: int, reason: str, shares: Mapping[str, float] | None = None) -> StageConfig:
    """The stage's latest StageConfig with the tuner's replicas (and ``shares``: its routing, every
    variant the latest one named kept, at 0 when not given one); the spec's defaults if none was seen."""
    if latest is None:
        latest = pipeline.stage(stage).defaults
    hw = pipeline.hardware.get(latest.hardware)
    price = hw.cost_per_hour if hw is not None else 0.0
    routing = latest.routing
    if shares is not None:
        routing = {**{v: 0.0 for v in routing}, **shares}
    return replace(latest, replicas=replicas, partitions=partitions, epoch=next_epoch(latest.epoch),
                   cost_per_hour=replicas * price, reason=reason, routing=dict(routing))


def scaling_action_record(pipeline: str, change: StageChange, partitions: int, at_ns: int,
                          cost_per_hour: float) -> ScalingAction:
    return ScalingAction(pipeline=pipeline, stage=change.stage, replicas=change.replicas,
                         previous_replicas=change.previous, partitions=partitions, reason=describe(change),
                         window_s=change.window_s, live_rate_qps=change.live_rate_qps,
                         planned_rate_qps=change.planned_rate_qps, at_ns=at_ns, cost_per_hour=cost_per_hour)


def describe_shares(change: ShareChange) -> str:
    def mix(shares: Mapping[str, float]) -> str:
        return ", ".join(f"{v} {f:.2f}" for v, f in shares.items() if f > 0)
    return (f"{change.reason}: load {change.load:.2f} on {mix(change.previous)} -> {mix(change.shares)} "
            f"(accuracy {change.accuracy[0]:.4f} -> {change.accuracy[1]:.4f})")


def describe(change: StageChange) -> str:
    pace = f" (capacity at pace {change.pace:.2f})" if change.pace != 1.0 else ""
    if change.window_s is not None:
        return (f"{change.reason}: {change.live_rate_qps:.1f} qps at the {change.window_s:g} s window "
                f"> planned {change.planned_rate_qps:.1f} qps{pace}")
    return f"{change.reason}: peak 5 s rate {change.live_rate_qps:.1f} qps over the last 30 s{pace}"


class TunerService:
    def __init__(self, pipeline: Pipeline, plan: TunerPlan, config: TunerConfig, actuator: Actuator, *,
                 partitions: Mapping[str, int], publish: Publish | None = None,
                 grow: GrowPartitions | None = None, metrics: TunerMetrics | None = None,
                 settings: ServiceSettings = ServiceSettings(), pace: PaceConfig = PaceConfig(),
                 clock: Callable[[], int] = time.time_ns) -> None:
        self.pipeline, self.plan, self.config, self.actuator = pipeline, plan, config, actuator
        self.settings = settings
        self.partitions = dict(partitions)  # stage -> partitions of its input topic
        self.latest_configs: dict[str, StageConfig] = {}
        self._publish, self._grow, self._clock = publish, grow, clock
        self.metrics = metrics
        self.tracker = self._tracker(plan)
        self.pace = PaceTracker(pace)
        self._expected = expected_service(plan)
        self.state = TunerState.initial(plan, clock())
        self.handoff_epoch = -1
        self._next_plan: TunerPlan | None = None
        self._counted = (0, 0)
        self._short: dict[str, tuple[int, int]] = {}  # stage -> (last short at, most asked)
        if metrics is not None:
            metrics.observe_plan(plan)
            for stage, n in self.partitions.items():
                metrics.partitions.labels(pipeline.name, stage).set(n)

    def on_handoff(self, record: TunerHandoff) -> None:
        """A TunerHandoff from the control topic: the planner's new plan, taken at the next tick."""
        if record.pipeline != self.pipeline.name or record.epoch <= self.handoff_epoch:
            return
        try:
            plan = planfile.from_handoff(record, pipeline=self.pipeline)
        except planfile.PlanFileError as exc:
            log.warning("tuner hand-off epoch %s ignored: %s", record.epoch, exc)
            return
        self.handoff_epoch = record.epoch
        self._next_plan = plan

    async def _follow_plan(self, now_ns: int) -> None:
        """Plan with the planner's latest hand-off: its envelope and replicas from now on. The planner
        published the stage configs itself, so the actuator only converges to the planned counts."""
        plan, self._next_plan = self._next_plan, None
        if plan is None:
            return
        if tracker_windows(plan, self.config) != tracker_windows(self.plan, self.config):
            self.tracker = self._tracker(plan)
            self._counted = (0, 0)  # the new tracker counts from zero
        self.plan = plan
        self._expected = expected_service(plan)
        self.state = TunerState.initial(plan, now_ns)
        for stage, n in plan.planned_replicas.items():
            await asyncio.to_thread(self.actuator.set_replicas, stage, n)
        if self.metrics is not None:
            self.metrics.observe_plan(plan)
        log.info("following plan epoch %d: replicas %s at %.1f qps", self.handoff_epoch,
                 plan.planned_replicas, plan.mean_rate_qps)

    def _tracker(self, plan: TunerPlan) -> EnvelopeTracker:
        return EnvelopeTracker(tracker_windows(plan, self.config), bucket_s=self.settings.bucket_s,
                               recent_horizon_s=max(self.config.down_horizon_s, self.config.up_horizon_s) + 1,
                               reorder_s=self.settings.reorder_s)

    def feed(self, timestamps_ns: np.ndarray) -> None:
        self.tracker.add(timestamps_ns)

    def on_result(self, record: Mapping) -> None:
        """An InferenceResult from the results topic: its hops' batch times, for the stages' pace."""
        self.pace.add(record, self._expected)

    def on_stage_config(self, record: StageConfig) -> None:
        """Remember the latest StageConfig per stage (from the control topic) to republish from."""
        prev = self.latest_configs.get(record.stage)
        if prev is None or record.epoch >= prev.epoch:
            self.latest_configs[record.stage] = record

    async def tick(self) -> ScaleDecision:
        now = self._clock()
        await self._follow_plan(now)
        t0 = time.perf_counter()
        live = observe(self.tracker, self.plan, now, self.config, *self.pace.read(now, self.config.down_horizon_s))
        decision, self.state = decide(live, self.plan, self.state, now, self.config)
        spent = time.perf_counter() - t0
        if self.metrics is not None:
            arrivals, late = self.tracker.arrivals, self.tracker.late
            self.metrics.observe_decision(live, decision, spent, arrivals - self._counted[0],
                                          late - self._counted[1])
            self._counted = (arrivals, late)
        moved = {c.stage: c for c in decision.share_changes}
        for change in decision.changes:
            await self._apply(change, now, moved.pop(change.stage, None))
        for change in moved.values():
            await self._reshare(change, decision.targets[change.stage])
        self._say_short(decision.short, now)
        return decision

    def _say_short(self, short: Mapping[str, int], now_ns: int) -> None:
        """A log line when a stage's envelope starts asking more replicas than the tuner may run, and
        one when it has not for the quiet period (so a burst's flicker around the bound is one episode)."""
        for stage, n in short.items():
            at, peak = self._short.get(stage, (None, 0))
            if at is None:
                log.warning("%s %s: the live envelope asks %d replicas, at most %d may run: capacity short, "
                            "requests past their deadline are dropped early", self.pipeline.name, stage, n,
                            self.config.max_replicas)
            self._short[stage] = (now_ns, max(peak, n))
        for stage, (at, peak) in list(self._short.items()):
            if stage not in short and now_ns - at >= self.config.quiet_ns:
                log.info("%s %s: capacity no longer short (the envelope asked up to %d replicas)",
                         self.pipeline.name, stage, peak)
                del self._short[stage]

    async def _reshare(self, change: ShareChange, replicas: int) -> None:
        """Publish the stage's new routing shares (its replicas and partitions as they are)."""
        stage = change.stage
        have = self.partitions.get(stage, self.pipeline.stage(stage).defaults.partitions)
        config = stage_config_record(self.pipeline, self.latest_configs.get(stage), stage, replicas, have,
                                     describe_shares(change), change.shares)
        self.latest_configs[stage] = config
        log.info("%s %s: shares %s", self.pipeline.name, stage, config.reason)
        if self._publish is not None:
            await self._publish(topics.control(self.pipeline.name), "StageConfig", config, stage)

    async def _apply(self, change: StageChange, now_ns: int, shares: ShareChange | None = None) -> None:
        stage, name = change.stage, self.pipeline.name
        topic = topics.stage_input(name, stage)
        have = self.partitions.get(stage, self.pipeline.stage(stage).defaults.partitions)
        want = target_partitions(self.settings.consumers(change.replicas), have,
                                 headroom=self.settings.partition_headroom)
        if want > have and self._grow is not None:
            have = await self._grow(topic, want)
            log.info("grew %s to %d partitions", topic, have)
        self.partitions[stage] = have
        await asyncio.to_thread(self.actuator.set_replicas, stage, change.replicas)
        config = stage_config_record(self.pipeline, self.latest_configs.get(stage), stage, change.replicas,
                                     have, describe(change) + (f"; {describe_shares(shares)}" if shares else ""),
                                     shares.shares if shares else None)
        self.latest_configs[stage] = config
        action = scaling_action_record(name, change, have, now_ns, config.cost_per_hour)
        log.info("%s %s: %d -> %d replicas (%s)", name, stage, change.previous, change.replicas,
                 action.reason)
        if self.metrics is not None:
            self.metrics.partitions.labels(name, stage).set(have)
        if self._publish is not None:
            await self._publish(topics.control(name), "StageConfig", config, stage)
            await self._publish(topics.scaling(name), "ScalingAction", action, stage)

    async def run(self, arrivals: AsyncIterator[np.ndarray], stop: asyncio.Event,
                  on_decision: Callable[[ScaleDecision], None] | None = None) -> None:
        """Feed ``arrivals`` (chunks of epoch-ns timestamps) and decide every ``interval_s`` until ``stop``."""

        async def pump() -> None:
            async for chunk in arrivals:
                self.feed(chunk)
                if stop.is_set():
                    return

        async def step() -> None:
            decision = await self.tick()
            if on_decision is not None:
                on_decision(decision)

        await periodically(step, self.settings.interval_s, stop, feeder=asyncio.create_task(pump()))
