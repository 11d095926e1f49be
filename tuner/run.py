"""Running the tuner service against Kafka: the wiring used by `slipstream tuner`, `up` and `demo`."""
from __future__ import annotations

import asyncio
import logging

from ..streams import topics
from ..streams.config import KafkaSettings
from ..streams.lag import LagReader, stage_groups
from ..streams.loops import periodically
from ..streams.metrics_http import MetricsAddr
from ..streams.spec import Pipeline
from .pace import PaceConfig
from .policy import TunerConfig, TunerPlan
from .service import ServiceSettings, TunerService

log = logging.getLogger(__name__)


async def run_tuner(pipe: Pipeline, plan: TunerPlan, config: TunerConfig, actuator, *, dry_run: bool,
                    settings: KafkaSettings, interval_s: float, lookback_s: float, stop: asyncio.Event,
                    metrics_addr: MetricsAddr | None, on_decision=None, replicas_per_worker: int | None = None,
                    plan_epoch: int | None = None, lag_interval_s: float = 5.0,
                    pace: PaceConfig = PaceConfig(), arrivals_source=None) -> None:
    """Run the tuner service on Kafka until ``stop`` is set: arrivals from the input topic, configs
    from the control topic, decisions applied through ``actuator`` and published (unless dry-run).
    ``plan_epoch``: ``plan`` is the planner's hand-off of that epoch (read from the control topic), so
    only later hand-offs replace it. The results topic's hop timings give the workers' pace
    (``slipstream.tuner.pace``). Every ``lag_interval_s`` each worker role's consumer lag is read
    from the broker (``slipstream.streams.lag``) into ``slipstream_group_lag_records``. ``arrivals_source``:
    what makes the arrivals reader (``KafkaArrivals``'s signature; ``slipstream.streams.shared_arrivals``
    when the planner service runs in the same process), ``KafkaArrivals`` by default."""
    from prometheus_client import CollectorRegistry

    from ..streams import control_io as kafka_io
    from ..streams.metrics_http import serve, standard_collectors
    from .metrics import TunerMetrics

    registry = CollectorRegistry()  # one per service run: several runs may share a process
    running, endpoint = asyncio.Event(), None
    if metrics_addr is not None:  # /readyz: 200 once arrivals are being read
        standard_collectors(registry)
        endpoint = serve(metrics_addr, registry, lambda: None if running.is_set() else "starting")
        print(f"slipstream-tuner metrics={endpoint.addr}", flush=True)
    metrics = TunerMetrics(pipe.name, registry)
    partitions = await kafka_io.stage_partitions(settings, pipe.name, [s.name for s in pipe.stages])
    publisher = None if dry_run else kafka_io.KafkaPublisher(settings, pipe.name)
    service = TunerService(pipe, plan, config, actuator, partitions=partitions,
                           publish=publisher.publish if publisher else None,
                           grow=None if dry_run else kafka_io.grower(settings),
                           metrics=metrics,
                           settings=ServiceSettings(interval_s=interval_s, replicas_per_worker=replicas_per_worker),
                           pace=pace)
    if plan_epoch is not None:
        service.handoff_epoch = plan_epoch

    def on_stage_config(record) -> None:
        service.on_stage_config(record)
        metrics.observe_config(record)

    arrivals = (arrivals_source or kafka_io.KafkaArrivals)(
        settings, pipe.name, pipe.source, on_stage_config=on_stage_config, on_handoff=service.on_handoff,
        lookback_s=lookback_s, spec=pipe, on_invalid=metrics.control_invalid.labels(pipe.name).inc)
    if publisher:
        await publisher.start()
    await arrivals.start()
    results = kafka_io.KafkaResults(settings, pipe.name)
    await results.start()
    lags = LagReader(settings, stage_groups(pipe))
    await lags.start()
    roles = {g: g.removeprefix(topics.consumer_group(pipe.name, "")) for g in lags.groups}

    async def read_lag() -> None:
        try:
            for group, n in (await lags.read()).items():
                metrics.group_lag.labels(pipe.name, roles[group]).set(n)
        except Exception as exc:  # a broker hiccup: the next read retries; the gauges keep their values
            log.warning("reading consumer lag from the broker failed: %s", exc)

    lag_task = asyncio.create_task(periodically(read_lag, lag_interval_s, stop))
    pace_task = asyncio.create_task(results.follow(service.on_result, stop))
    running.set()
    try:
        await service.run(arrivals, stop, on_decision)
    finally:
        lag_task.cancel()
        pace_task.cancel()
        await asyncio.gather(lag_task, pace_task, return_exceptions=True)
        await results.stop()
        await lags.stop()
        await arrivals.stop()
        if publisher:
            await publisher.stop()
        if endpoint is not None:
            endpoint.close()
