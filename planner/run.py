"""The planner service on Kafka (`slipstream planner`): every interval, re-plan from the recent arrival
timestamps of the pipeline's input topic (``slipstream.planner.service.Replanner``: a forecast of the next
interval's peak, the chosen mode, the estimator's check) and publish one ``StageConfig`` per stage to
the control topic, only when the plan changed. A control record's epoch is its offset on the control
topic (``slipstream.streams.control_io.read_record``), so no restart or other writer can make a plan stale; the
written field continues from the highest epoch read (``slipstream.streams.control_rules.next_epoch``).
"""
from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from dataclasses import replace
from typing import Callable

import numpy as np

from ..schemas import records
from ..streams import codec, kafka as kclient, topics
from ..streams.config import KafkaSettings
from ..streams.control_io import KafkaArrivals, KafkaPublisher
from ..streams.loops import periodically
from ..streams.spec import Pipeline
from .results import nearest_rank
from .service import PlannedHandoff, ReplanOutput, Replanner, ReplanState, handoff_record

log = logging.getLogger(__name__)


class ArrivalWindow:
    """The arrival times (s) of the last ``horizon_s`` seconds, appended in chunks."""

    def __init__(self, horizon_s: float) -> None:
        self.horizon_s = horizon_s
        self._chunks: list[np.ndarray] = []

    def add(self, stamps_ns: np.ndarray) -> None:
        self._chunks.append(np.asarray(stamps_ns, dtype=np.int64) / 1e9)

    def snapshot(self, now_s: float) -> np.ndarray:
        a = np.sort(np.concatenate(self._chunks)) if self._chunks else np.empty(0)
        a = a[a >= now_s - self.horizon_s]
        self._chunks = [a]
        return a


class MeasuredLatency:
    """The end-to-end p99 of the requests that ended on the results topic in the last ``horizon_s``
    (for the planner's predicted-vs-measured p99): a result not ``done`` counts as infinitely late,
    nearest rank (``slipstream.planner.results``: the estimator's and the run report's definition, ``LATE``)."""

    def __init__(self, settings: KafkaSettings, pipeline: str, horizon_s: float, keep_s: float = 120.0) -> None:
        self.settings, self.topic, self.horizon_ns = settings, topics.results(pipeline), int(horizon_s * 1e9)
        self._seen: list[tuple[int, float]] = []  # (finished_ns, latency_ms; inf when not done)
        self.keep_ns = int(keep_s * 1e9)
        self._recent: deque[records.InferenceResult] = deque(maxlen=20_000)  # without outputs, for the refit

    async def follow(self) -> None:
        cons = kclient.consumer(self.settings, self.topic, group_id=None, auto_offset_reset="latest",
                                **kclient.REPORT_FETCH)
        await cons.start()
        try:
            async for msg in cons:
                try:
                    d = await codec.decode_fetched("InferenceResult", msg.value)
                except codec.CodecError:
                    continue
                d["output"] = b""  # not kept
                self.add(records.InferenceResult.from_dict(d))
        finally:
            await cons.stop()

    def add(self, result: records.InferenceResult) -> None:
        done = result.status == "done"
        self._seen.append((result.finished_ns, (result.finished_ns - result.created_ns) / 1e6 if done else math.inf))
        self._recent.append(result)

    def recent(self, now_ns: int) -> list[records.InferenceResult]:
        """The results that ended in the last ``keep_s`` (hop timings for the calibration refit)."""
        while self._recent and self._recent[0].finished_ns < now_ns - self.keep_ns:
            self._recent.popleft()
        return list(self._recent)

    def p99_ms(self, now_ns: int) -> float | None:
        self._seen = [x for x in self._seen if x[0] >= now_ns - self.horizon_ns]
        return nearest_rank(np.array([ms for _, ms in self._seen]), 99) if self._seen else None


async def publish_plan(publisher: KafkaPublisher, pipeline: str, configs, handoff: PlannedHandoff | None,
                       epoch: int, now_ns: int) -> records.TunerHandoff | None:
    """One plan on the control topic: a StageConfig per stage, then the tuner's hand-off (when it has
    an envelope); returns the hand-off record as its readers see it (its epoch: its offset)."""
    for rec in configs:
        await publisher.publish(topics.control(pipeline), "StageConfig", rec, key=rec.stage)
    if handoff is None or handoff.sample_rates is None:
        return None
    rec = handoff_record(handoff, pipeline, epoch, now_ns)
    offset = await publisher.publish(topics.control(pipeline), "TunerHandoff", rec, key=topics.HANDOFF_KEY)
    return replace(rec, epoch=offset)


async def run_planner(pipe: Pipeline, replanner: Replanner, settings: KafkaSettings, *, interval_s: float,
                      lookback_s: float, stop: asyncio.Event,
                      on_step: Callable[[ReplanOutput, float | None], None] | None = None,
                      initial: ReplanState | None = None, on_invalid: Callable[[], None] | None = None,
                      arrivals_source: Callable[..., KafkaArrivals] = KafkaArrivals) -> None:
    """``on_step(output, measured_p99_ms)`` after each re-plan; the measured p99 is over the results
    of the last interval (None before any). With ``initial`` (a plan already in force, e.g. published
    at start-up) the first re-plan comes one interval later and republishes only a different plan.
    ``arrivals_source`` makes the arrivals reader (``slipstream.streams.shared_arrivals`` when the tuner runs
    in the same process)."""
    window = ArrivalWindow(max(lookback_s, replanner.settings.sample_s,
                               replanner.settings.forecast.interval_s
                               * replanner.settings.forecast.lookback_intervals))
    latest_epoch = {"epoch": 0}

    def on_config(rec: records.StageConfig) -> None:
        if rec.pipeline == pipe.name:
            latest_epoch["epoch"] = max(latest_epoch["epoch"], rec.epoch)

    arrivals = arrivals_source(settings, pipe.name, pipe.source, on_stage_config=on_config, lookback_s=lookback_s,
                               spec=pipe, on_invalid=on_invalid)
    publisher = KafkaPublisher(settings, pipe.name)
    await arrivals.start()
    await publisher.start()

    first = asyncio.Event()

    async def pump() -> None:
        async for chunk in arrivals:
            window.add(chunk)
            first.set()

    state = initial or ReplanState()

    async def step() -> None:
        nonlocal state, replanner
        now_ns = time.time_ns()
        state = ReplanState(max(state.epoch, latest_epoch["epoch"]), state.plan, state.last_step_ns)
        sample = window.snapshot(now_ns / 1e9)
        refitted = await asyncio.to_thread(replanner.refit, measured.recent(now_ns), state.plan)
        if refitted is not replanner:
            replanner = refitted
            log.info("calibration refitted on %d recent results: %s", refitted.calibration["samples"]["results"],
                     ", ".join(f"{k} x{v['scale']:.2f}" for k, v in refitted.calibration["service"].items()))
        # MILP and estimator are CPU work: off the event loop, so arrivals keep flowing
        out, state = await asyncio.to_thread(replanner.step, state, sample, now_ns)
        if out.configs:
            await publish_plan(publisher, pipe.name, out.configs, out.handoff, state.epoch, now_ns)
            log.info("published plan epoch %d (%s, %.1f qps forecast)", state.epoch, out.plan.mode,
                     out.forecast_qps)
        if on_step is not None:
            on_step(out, measured.p99_ms(now_ns))

    measured = MeasuredLatency(settings, pipe.name, max(interval_s, 10.0))
    results_reader = asyncio.create_task(measured.follow())
    try:
        feeder = asyncio.create_task(pump())
        if initial is not None:  # the plan in force stands for one interval of arrivals first
            try:
                await asyncio.wait_for(stop.wait(), timeout=interval_s)
            except TimeoutError:
                pass
        else:
            try:  # the first plan should see the history, if there is any
                await asyncio.wait_for(asyncio.shield(first.wait()), timeout=min(interval_s, 5.0))
            except TimeoutError:
                log.info("no arrivals in the last %.0f s: planning for the forecast floor", lookback_s)
        await periodically(step, interval_s, stop, feeder=feeder)
    finally:
        results_reader.cancel()
        await asyncio.gather(results_reader, return_exceptions=True)
        await arrivals.stop()
        await publisher.stop()

