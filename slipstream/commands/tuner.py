"""`slipstream tuner`: scale stage replicas from the live traffic envelope."""
from __future__ import annotations

import asyncio

import click

from slipstream.options import key_values
from slipstream.tuner_options import (STANDBY, plan_from_topic, pipeline_of, plan_of, run_local, standby_option,
                                      stop_on_signals, tuner_config, tuner_only, tuner_options)
from slipstream.streams.config import KafkaSettings
from slipstream.tuner.actuators import DryRunActuator
from slipstream.tuner.policy import ScaleDecision
from slipstream.tuner.run import run_tuner


def _print_decision(decision: ScaleDecision) -> None:
    from slipstream.tuner.service import describe, describe_shares
    for c in decision.changes:
        click.echo(f"{c.stage}: {c.previous} -> {c.replicas}  {describe(c)}")
    for sc in decision.share_changes:
        click.echo(f"{sc.stage}: shares  {describe_shares(sc)}")


@click.command("tuner")
@tuner_options
@click.option("--plan", "plan_file", default=None, type=click.Path(dir_okay=False),
              help="Tuner plan JSON (planned envelope, mu, visit ratios): see `slipstream tuner-plan` "
                   "[default: the planner's latest hand-off on the control topic].")
@click.option("--wait-plan-s", default=300.0, show_default=True,
              help="Without --plan: how long to wait for the planner's first hand-off.")
@click.option("--dry-run", is_flag=True, help="Print decisions; start, stop and publish nothing.")
@click.option("--actuator", type=click.Choice(["local", "k8s"]), default="local", show_default=True,
              help="local: run the workers as processes here (like `up`); k8s: scale stage Deployments.")
@click.option("--namespace", default="default", show_default=True, help="Kubernetes namespace.")
@click.option("--pod-replicas", multiple=True,
              help="k8s: STAGE=K replicas per pod of the stage (its workers' --max-replicas, written "
                   "by k8s-manifests); n replicas run in ceil(n/K) pods [default: 1].")
@standby_option(STANDBY)
def tuner_cmd(pipeline_file, activation_s, max_replicas, rho_mode, interval_s, lookback_s, metrics_addr,
              reserve_cores, plan_file, wait_plan_s, dry_run, actuator, namespace, pod_replicas, standby) -> None:
    """Scale stage replicas from the live traffic envelope (InferLine's tuner). The plan comes from
    --plan, else from the planner's latest hand-off on the control topic; later hand-offs are followed."""
    pipe = pipeline_of(pipeline_file)
    config = tuner_config(activation_s, max_replicas, rho_mode)
    per_pod = key_values(pod_replicas, int, "--pod-replicas", "STAGE=K")
    unknown = sorted(set(per_pod) - {s.name for s in pipe.stages})
    if unknown or any(k < 1 for k in per_pod.values()):
        raise click.BadParameter(f"stages {unknown} are not in the pipeline, or a K < 1: {per_pod}",
                                 param_hint="--pod-replicas")
    settings = KafkaSettings.from_env()
    plan, epoch = (plan_of(plan_file, pipe), None) if plan_file else plan_from_topic(pipe, settings, wait_plan_s)
    if not dry_run and actuator == "local":
        run_local(pipe, pipeline_file, plan.planned_replicas, None, reserve_cores,
            tuner_only(pipe, plan, config, settings, interval_s, lookback_s, metrics_addr, epoch),
            standby=standby, kafka=settings)
        return

    async def main() -> None:
        stop = asyncio.Event()
        stop_on_signals(stop)
        if dry_run:
            act = DryRunActuator()
        else:
            from slipstream.tuner.k8s import KubernetesActuator
            try:
                act = KubernetesActuator(pipe.name, namespace, per_pod=per_pod, standby=standby)
            except RuntimeError as exc:
                raise click.ClickException(str(exc)) from None
        await run_tuner(pipe, plan, config, act, dry_run=dry_run, settings=settings, interval_s=interval_s,
                        lookback_s=lookback_s, stop=stop, metrics_addr=metrics_addr,
                        on_decision=_print_decision if dry_run else None, plan_epoch=epoch)

    asyncio.run(main())


commands = [tuner_cmd]
