"""`slipstream chaos-tuner` (hidden): the tuner as a process of its own, publishing its decisions and
starting no process; `chaos` and `soak` run it under their supervisor."""
from __future__ import annotations

import asyncio
import signal

import click


@click.command("chaos-tuner", hidden=True)
@click.option("--pipeline", "pipeline_file", required=True, type=click.Path(dir_okay=False))
@click.option("--activation-s", default=1.0, show_default=True)
@click.option("--max-replicas", default=1, show_default=True)
@click.option("--wait-plan-s", default=300.0, show_default=True)
def chaos_tuner(pipeline_file, activation_s, max_replicas, wait_plan_s) -> None:
    """The tuner on the planner's latest hand-off, publishing its decisions (StageConfig replicas, which
    the workers run as model replicas) and starting no process: the supervisor of `chaos`/`soak` owns them."""
    from slipstream.tuner_options import plan_from_topic, pipeline_of, tuner_config
    from slipstream.streams.config import KafkaSettings
    from slipstream.tuner.actuators import DryRunActuator
    from slipstream.tuner.run import run_tuner
    from slipstream.tuner.service import ServiceSettings

    pipe = pipeline_of(pipeline_file)
    settings = KafkaSettings.from_env()
    plan, epoch = plan_from_topic(pipe, settings, wait_plan_s)
    config = tuner_config(activation_s, max_replicas, "per-window")

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run_tuner(pipe, plan, config, DryRunActuator(), dry_run=False, settings=settings,
                        interval_s=ServiceSettings.interval_s, lookback_s=60.0, stop=stop, metrics_addr=None,
                        replicas_per_worker=max_replicas, plan_epoch=epoch)

    asyncio.run(main())


commands = [chaos_tuner]
