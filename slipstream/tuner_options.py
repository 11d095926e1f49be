"""What `slipstream tuner`, `up`, `tuner-plan` and `chaos-tuner` share: the pipeline and plan
arguments, the tuner's options, its plan from the control topic, and local workers with control on top."""
from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import click
import numpy as np

from slipstream.options import metrics_addr_option
from slipstream.specs import load_or_fail
from slipstream.streams.arrivals import read_arrivals
from slipstream.streams.config import KafkaSettings
from slipstream.streams.spec import Pipeline
from slipstream.tuner import planfile
from slipstream.tuner.policy import TunerConfig, TunerPlan
from slipstream.tuner.run import run_tuner
from slipstream.tuner.service import ServiceSettings


def pipeline_of(path: str) -> Pipeline:
    return load_or_fail(path, "--pipeline")


def plan_of(path: str, pipe: Pipeline) -> TunerPlan:
    try:
        return planfile.load(path, pipeline=pipe)
    except planfile.PlanFileError as exc:
        raise click.BadParameter(str(exc), param_hint="--plan") from None


def tuner_config(activation_s, max_replicas, rho_mode) -> TunerConfig:
    try:
        return TunerConfig(activation_s=activation_s, max_replicas=max_replicas, rho_mode=rho_mode)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def stop_on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)


common = [
    click.option("--pipeline", "pipeline_file", required=True, type=click.Path(dir_okay=False)),
    click.option("--activation-s", default=5.0, show_default=True,
                 help="Replica activation time (measure it: slipstream bench tuner); scale-down waits 3x it."),
    click.option("--max-replicas", default=64, show_default=True),
    click.option("--rho-mode", type=click.Choice(["per-window", "mean"]), default="per-window", show_default=True),
    click.option("--interval-s", default=ServiceSettings.interval_s, show_default=True, help="Seconds between decisions."),
    click.option("--lookback-s", default=60.0, show_default=True, help="History read at start."),
    metrics_addr_option(),
    click.option("--reserve-cores", default=0.5, show_default=True,
                 help="Local workers: cores kept for the broker, load generator and control plane; a stage "
                      "runs at most (cores - this, rounded down) replicas, all in one process."),
]


STANDBY = 1  # warm workers per stage: failover in about a second for one more replica per stage
STANDBY_HELP = ("Warm worker processes per stage (and join) beyond what the plan's replicas need: members of "
                "the stage's group holding the model, so a dead worker's partitions move to a loaded worker "
                "within about a second (docs/kafka.md, \"Failover\").")


def standby_option(default: int):
    return click.option("--standby", type=click.IntRange(min=0), default=default, show_default=True,
                        help=STANDBY_HELP)


def tuner_options(fn):
    for opt in reversed(common):
        fn = opt(fn)
    return fn


def run_local(pipe, pipeline_file, replicas, log_dir, reserve_cores: float, control, profiles: str | None = None,
              standby: int = 0, kafka: KafkaSettings | None = None) -> None:
    """Run the workers as local processes (``standby`` warm ones more per worker role; a dead one's group
    members removed at once on ``kafka``, default the environment's) with
    ``control(actuator, replicas_per_worker)(stop)`` on top."""
    from slipstream.tuner.supervisor import LocalCapacity, local_supervisor

    capacity = LocalCapacity(reserve_cores)
    supervisor = local_supervisor(pipe, pipeline_file, replicas, capacity,
                                  log_dir=Path(log_dir) if log_dir else None, loglevel="warn", profiles=profiles,
                                  standby=standby, kafka=kafka or KafkaSettings.from_env())
    task = control(supervisor.actuator, capacity.max_replicas)

    async def main() -> None:
        stop = asyncio.Event()
        stop_on_signals(stop)
        await supervisor.run(stop, task)

    asyncio.run(main())


def plan_from_topic(pipe: Pipeline, settings: KafkaSettings, wait_s: float) -> tuple[TunerPlan, int]:
    """The planner's latest hand-off on the control topic and its epoch, waiting up to ``wait_s``."""
    from slipstream.streams.control_io import latest_handoff

    def waiting(topic: str, w: float) -> None:
        click.echo(f"tuner: no planner hand-off on {topic} yet; waiting up to {w:g} s (--wait-plan-s)", err=True)

    rec = asyncio.run(latest_handoff(settings, pipe.name, wait_s=wait_s, on_wait=waiting))
    if rec is None:
        raise click.ClickException(
            f"no planner hand-off (TunerHandoff) for pipeline {pipe.name!r} on its control topic within "
            f"{wait_s:g} s: start the planner (`slipstream planner`) or give --plan FILE")
    try:
        return planfile.from_handoff(rec, pipeline=pipe), rec.epoch
    except planfile.PlanFileError as exc:
        raise click.ClickException(f"the planner's hand-off of epoch {rec.epoch}: {exc}") from None


def tuner_only(pipe, plan, config, settings, interval_s, lookback_s, metrics_addr, plan_epoch=None):
    from dataclasses import replace

    def control(actuator, replicas_per_worker):
        cfg = replace(config, max_replicas=min(config.max_replicas, replicas_per_worker))
        return lambda stop: run_tuner(pipe, plan, cfg, actuator, dry_run=False, settings=settings,
                                      interval_s=interval_s, lookback_s=lookback_s, stop=stop,
                                      metrics_addr=metrics_addr, replicas_per_worker=replicas_per_worker,
                                      plan_epoch=plan_epoch)

    return control


def read_sample(path: str) -> np.ndarray:
    """The arrival times of ``--sample`` (``slipstream.streams.arrivals.read_arrivals``); a bad file is a usage error."""
    try:
        return read_arrivals(path)
    except (OSError, ValueError) as exc:
        raise click.BadParameter(f"{path}: {exc}", param_hint="--sample") from None
