"""`slipstream chaos` (the fault suite), `slipstream soak` (memory and lag over a long run), and
`slipstream chaos-tuner` (the tuner as a process of its own, which those two run under the supervisor)."""
from __future__ import annotations

import asyncio
import signal

import click

from slipstream.options import state_default

PIPELINE = "deploy/pipelines/dag-fanout.yaml"
common = [
    click.option("--pipeline", "pipeline_file", default=PIPELINE, show_default=True,
                 type=click.Path(exists=True, dir_okay=False),
                 help="Spec to copy under a fresh name (own topics and groups) for this run."),
    click.option("--brokers", default=1, show_default=True, type=click.IntRange(1, 9),
                 help="1: the single local broker (or SLIPSTREAM_BOOTSTRAP); 3: the local cluster "
                      "(`kafka up --brokers 3`), started if needed and stopped again if started here."),
    click.option("--profiles", "profiles_dir", default=state_default("profiles"), show_default="STATE_DIR/profiles"),
    click.option("--mode", default="milp", show_default=True, help="Planner mode of the plan and the planner service."),
    click.option("--replan-s", default=30.0, show_default=True, help="The planner service's interval."),
]


def _with(fn):
    for opt in reversed(common):
        fn = opt(fn)
    return fn


@click.command()
@_with
@click.option("--trace", default="poisson:rate=6,duration=40", show_default=True,
              help="The open-loop replay of every case (docs/loadgen.md).")
@click.option("--fault-at", "fault_at_s", default=10.0, show_default=True, help="Seconds after the first send.")
@click.option("--broker-down-s", default=5.0, show_default=True, help="A killed broker is restarted after this.")
@click.option("--freeze-s", default=None, type=float,
              help="SIGSTOP length [default: the workers' session timeout + 5 s].")
@click.option("--freeze-stage", default=None, help="The stage frozen [default: the source stage].")
@click.option("--case", "only", multiple=True, help="Run only the cases whose name contains this (repeatable).")
@click.option("--drain-s", default=90.0, show_default=True, help="Wait this long for results after the last send.")
@click.option("--report", "report_dir", default=None, help="[default: reports/chaos-<brokers>b]")
@click.option("--port", type=int, default=None,
              help="Run on a Kafka of the run's own on this port (node 1's; started and stopped by the run), "
                   "apart from a shared broker the broker faults must not kill.")
@click.option("--kafka-state", default=None, help="State folder of that Kafka [default: .state/kafka or "
                                                   ".state/kafka-cluster].")
def chaos(pipeline_file, brokers, profiles_dir, mode, replan_s, trace, fault_at_s, broker_down_s, freeze_s,
          freeze_stage, only, drain_s, report_dir, port, kafka_state) -> None:
    """Inject faults under an open-loop replay: kill -9 every stage worker, the join, the tuner and the
    planner service, SIGSTOP a worker past its session timeout, kill the broker (one of three with
    --brokers 3). Per case: requests, missing, duplicates, conflicting statuses, recovery time.
    SLIPSTREAM_PROCESSING=exactly-once runs every process with exactly-once processing."""
    from slipstream.chaos import FREEZE_S, ChaosOptions, run_suite

    run_suite(ChaosOptions(pipeline_file, trace, fault_at_s, brokers, broker_down_s, freeze_s or FREEZE_S,
                           freeze_stage, tuple(only), profiles_dir, report_dir or f"reports/chaos-{brokers}b",
                           mode, replan_s, drain_s, port=port, kafka_state=kafka_state))


@click.command()
@_with
@click.option("--minutes", default=5.0, show_default=True)
@click.option("--rate", "rate_qps", default=4.0, show_default=True, help="Poisson arrival rate (requests/s).")
@click.option("--trace", default=None,
              help="A trace spec (docs/loadgen.md) in place of Poisson --rate for --minutes, e.g. a stepped "
                   "rate to find the stack's capacity.")
@click.option("--sample-s", default=5.0, show_default=True, help="Seconds between samples of RSS and lag.")
@click.option("--warmup-s", default=60.0, show_default=True, help="Left out of the growth verdict.")
@click.option("--report", "report_dir", default="reports/soak", show_default=True)
def soak(pipeline_file, brokers, profiles_dir, mode, replan_s, minutes, rate_qps, trace, sample_s, warmup_s,
         report_dir) -> None:
    """Replay Poisson load for --minutes and plot RSS per process, consumer lag and attainment over time."""
    from slipstream.soak import SoakOptions, run_soak

    run_soak(SoakOptions(pipeline_file, minutes, rate_qps, brokers, sample_s, warmup_s, 30.0, profiles_dir,
                         report_dir, mode, replan_s, trace=trace))


@click.command("chaos-tuner", hidden=True)
@click.option("--pipeline", "pipeline_file", required=True, type=click.Path(dir_okay=False))
@click.option("--activation-s", default=1.0, show_default=True)
@click.option("--max-replicas", default=1, show_default=True)
@click.option("--wait-plan-s", default=300.0, show_default=True)
def chaos_tuner(pipeline_file, activation_s, max_replicas, wait_plan_s) -> None:
    """The tuner on the planner's latest hand-off, publishing its decisions (StageConfig replicas, which
    the workers run as model instances) and starting no process: the supervisor of `chaos`/`soak` owns them."""
    from slipstream.commands.tuner import _config, _pipeline, _plan_from_topic
    from streams.config import KafkaSettings
    from tuner.actuators import DryRunActuator
    from tuner.run import run_tuner

    pipe = _pipeline(pipeline_file)
    settings = KafkaSettings.from_env()
    plan, epoch = _plan_from_topic(pipe, settings, wait_plan_s)
    config = _config(activation_s, max_replicas, "per-window")

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run_tuner(pipe, plan, config, DryRunActuator(), dry_run=False, settings=settings, interval_s=0.5,
                        lookback_s=60.0, stop=stop, metrics_addr=None, max_instances=max_replicas,
                        plan_epoch=epoch)

    asyncio.run(main())


commands = [chaos, soak, chaos_tuner]
