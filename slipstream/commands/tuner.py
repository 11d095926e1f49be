"""`slipstream tuner`, `slipstream up`, `slipstream tuner-plan`, `slipstream k8s-manifests`."""
from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path

import click

from slipstream.options import key_values
import numpy as np
import yaml

from streams.config import KafkaSettings
from streams.spec import Pipeline, SpecError, load_pipeline
from tuner import planfile
from tuner.actuators import DryRunActuator
from tuner.run import run_tuner
from tuner.k8s import pipeline_manifests
from slipstream.commands.planner_service import MODES
from tuner.policy import ScaleDecision, TunerConfig, TunerPlan
from tuner.service import ServiceSettings, TunerService

log = logging.getLogger("slipstream.tuner")


def _pipeline(path: str) -> Pipeline:
    try:
        return load_pipeline(path)
    except SpecError as exc:
        raise click.BadParameter(str(exc), param_hint="--pipeline") from None


def _plan(path: str, pipe: Pipeline) -> TunerPlan:
    try:
        return planfile.load(path, pipeline=pipe)
    except planfile.PlanFileError as exc:
        raise click.BadParameter(str(exc), param_hint="--plan") from None


def _config(activation_s, max_replicas, rho_mode) -> TunerConfig:
    try:
        return TunerConfig(activation_s=activation_s, max_replicas=max_replicas, rho_mode=rho_mode)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _print_decision(decision: ScaleDecision) -> None:
    from tuner.service import describe
    for c in decision.changes:
        click.echo(f"{c.stage}: {c.previous} -> {c.replicas}  {describe(c)}")


def _stop_on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)


common = [
    click.option("--pipeline", "pipeline_file", required=True, type=click.Path(dir_okay=False)),
    click.option("--activation-s", default=5.0, show_default=True,
                 help="Replica activation time (measure it: slipstream bench tuner); scale-down waits 3x it."),
    click.option("--max-replicas", default=64, show_default=True),
    click.option("--rho-mode", type=click.Choice(["per-window", "mean"]), default="per-window", show_default=True),
    click.option("--interval-s", default=0.5, show_default=True, help="Seconds between decisions."),
    click.option("--lookback-s", default=60.0, show_default=True, help="History read at start."),
    click.option("--metrics-port", type=int, default=None,
                 help="Serve Prometheus metrics on this port."),
    click.option("--reserve-cores", default=0.5, show_default=True,
                 help="Local workers: cores kept for the broker, load generator and control plane; a stage "
                      "runs at most (cores - this, rounded down) model instances, all in one process."),
]


def _with_common(fn):
    for opt in reversed(common):
        fn = opt(fn)
    return fn


@click.command("tuner")
@_with_common
@click.option("--plan", "plan_file", default=None, type=click.Path(dir_okay=False),
              help="Tuner plan JSON (planned envelope, mu, visit ratios): see `slipstream tuner-plan` "
                   "[default: the planner's latest hand-off on the control topic].")
@click.option("--wait-plan-s", default=300.0, show_default=True,
              help="Without --plan: how long to wait for the planner's first hand-off.")
@click.option("--dry-run", is_flag=True, help="Print decisions; start, stop and publish nothing.")
@click.option("--actuator", type=click.Choice(["local", "k8s"]), default="local", show_default=True,
              help="local: run the workers as processes here (like `up`); k8s: scale stage Deployments.")
@click.option("--namespace", default="default", show_default=True, help="Kubernetes namespace.")
def tuner_cmd(pipeline_file, activation_s, max_replicas, rho_mode, interval_s, lookback_s, metrics_port,
              reserve_cores, plan_file, wait_plan_s, dry_run, actuator, namespace) -> None:
    """Scale stage replicas from the live traffic envelope (InferLine's tuner). The plan comes from
    --plan, else from the planner's latest hand-off on the control topic; later hand-offs are followed."""
    pipe = _pipeline(pipeline_file)
    config = _config(activation_s, max_replicas, rho_mode)
    settings = KafkaSettings.from_env()
    plan, epoch = (_plan(plan_file, pipe), None) if plan_file else _plan_from_topic(pipe, settings, wait_plan_s)
    if not dry_run and actuator == "local":
        _up(pipe, pipeline_file, plan.planned_replicas, None, reserve_cores,
            _tuner_only(pipe, plan, config, settings, interval_s, lookback_s, metrics_port, epoch))
        return

    async def main() -> None:
        stop = asyncio.Event()
        _stop_on_signals(stop)
        if dry_run:
            act = DryRunActuator()
        else:
            from tuner.k8s import KubernetesActuator
            try:
                act = KubernetesActuator(pipe.name, namespace)
            except RuntimeError as exc:
                raise click.ClickException(str(exc)) from None
        await run_tuner(pipe, plan, config, act, dry_run=dry_run, settings=settings, interval_s=interval_s,
                        lookback_s=lookback_s, stop=stop, metrics_port=metrics_port,
                        on_decision=_print_decision if dry_run else None, plan_epoch=epoch)

    asyncio.run(main())


def _up(pipe, pipeline_file, replicas, log_dir, reserve_cores: float, control, profiles: str | None = None) -> None:
    """Run the workers as local processes with ``control(actuator, max_instances)(stop)`` on top."""
    from tuner.supervisor import LocalCapacity, local_supervisor

    capacity = LocalCapacity(reserve_cores)
    supervisor = local_supervisor(pipe, pipeline_file, replicas, capacity,
                                  log_dir=Path(log_dir) if log_dir else None, loglevel="warn", profiles=profiles)
    task = control(supervisor.actuator, capacity.max_instances)

    async def main() -> None:
        stop = asyncio.Event()
        _stop_on_signals(stop)
        await supervisor.run(stop, task)

    asyncio.run(main())


def _plan_from_topic(pipe: Pipeline, settings: KafkaSettings, wait_s: float) -> tuple[TunerPlan, int]:
    """The planner's latest hand-off on the control topic and its epoch, waiting up to ``wait_s``."""
    from streams.control_io import latest_handoff

    def waiting(topic: str, w: float) -> None:
        click.echo(f"tuner: no planner hand-off on {topic} yet; waiting up to {w:g} s (--wait-plan-s)", err=True)

    rec = asyncio.run(latest_handoff(settings, pipe.name, wait_s=wait_s, on_wait=waiting))
    if rec is None:
        raise click.ClickException(
            f"no planner hand-off (TunerHandoff) for pipeline {pipe.name!r} on its control topic within "
            f"{wait_s:g} s: start the planner (`slipstream planner`) or give --plan FILE")
    try:
        return planfile.from_dict(rec, pipeline=pipe), int(rec["epoch"])
    except planfile.PlanFileError as exc:
        raise click.ClickException(f"the planner's hand-off of epoch {rec['epoch']}: {exc}") from None


def _tuner_only(pipe, plan, config, settings, interval_s, lookback_s, metrics_port, plan_epoch=None):
    from dataclasses import replace

    def control(actuator, max_instances):
        cfg = replace(config, max_replicas=min(config.max_replicas, max_instances))
        return lambda stop: run_tuner(pipe, plan, cfg, actuator, dry_run=False, settings=settings,
                                      interval_s=interval_s, lookback_s=lookback_s, stop=stop,
                                      metrics_port=metrics_port, max_instances=max_instances,
                                      plan_epoch=plan_epoch)

    return control


@click.command("up")
@_with_common
@click.option("--plan", "plan_file", default=None, type=click.Path(dir_okay=False),
              help="Tuner plan JSON; without it the spec's default replicas are run and the envelope of "
                   "--sample is the planned one.")
@click.option("--sample", default=None, type=click.Path(dir_okay=False),
              help="Sample arrival trace (seconds; .npy or one number per line) when there is no --plan.")
@click.option("--mu", multiple=True, help="STAGE=QPS single-replica throughput, when there is no --plan.")
@click.option("--profiles", "profiles_dir", default=None, type=click.Path(file_okay=False),
              help="Plan here first (planner mode --mode, from the profile store) for --trace, publish the "
                   "StageConfigs, and run that plan.")
@click.option("--trace", "trace_spec", default=None,
              help="With --profiles: the sample the planner plans for (a trace spec, docs/loadgen.md).")
@click.option("--mode", type=click.Choice(["milp", "inferline", "loki", "cg-mean", "cg-peak"]), default="milp",
              show_default=True, help="With --profiles: the planner mode.")
@click.option("--replan-s", default=30.0, show_default=True,
              help="With --profiles: the planner service re-plans from live arrivals this often (0: never).")
@click.option("--log-dir", default=".state/workers", show_default=True, help="Worker stdout/stderr logs.")
def up_cmd(pipeline_file, activation_s, max_replicas, rho_mode, interval_s, lookback_s, metrics_port,
           reserve_cores, plan_file, sample, mu, profiles_dir, trace_spec, mode, replan_s, log_dir) -> None:
    """Run the pipeline's initial plan as local worker processes, with the tuner on top.

    The plan comes from the planner (--profiles and --trace: plan now, publish the StageConfigs and
    keep re-planning every --replan-s with the planner service), from a tuner plan file (--plan, e.g. written by `slipstream planner --handoff`), or from a sample
    trace and per-stage throughputs (--sample, --mu) with the spec's default replicas."""
    pipe = _pipeline(pipeline_file)
    if profiles_dir:
        if not trace_spec:
            raise click.UsageError("--profiles needs --trace: the sample to plan for")
        from planner.profiles import ProfileStore
        from slipstream.commands.loadgen import _trace
        from slipstream.live import LiveOptions, control_plane, plan_and_publish

        settings, store = KafkaSettings.from_env(), ProfileStore(profiles_dir)
        opts = LiveOptions(mode=mode, activation_s=activation_s, max_replicas=max_replicas,
                           reserve_cores=reserve_cores, replan_s=replan_s)
        published = plan_and_publish(pipe, store, _trace(trace_spec, 0), opts, settings)
        _up(pipe, pipeline_file, published.tuner_plan.planned_replicas, log_dir, reserve_cores,
            lambda actuator, cap: control_plane(pipe, published, store, opts, settings, actuator, cap),
            profiles=profiles_dir)
        return
    if plan_file:
        plan = _plan(plan_file, pipe)
    elif sample and mu:
        plan = planfile.plan_for_pipeline(pipe, _read_trace(sample), key_values(mu, float, "--mu", "STAGE=NUMBER"))
    else:
        raise click.UsageError("give --profiles and --trace, or --plan, or --sample and --mu for every stage")
    config, settings = _config(activation_s, max_replicas, rho_mode), KafkaSettings.from_env()
    _up(pipe, pipeline_file, plan.planned_replicas, log_dir, reserve_cores,
        _tuner_only(pipe, plan, config, settings, interval_s, lookback_s, metrics_port))


def _read_trace(path: str) -> np.ndarray:
    p = Path(path)
    try:
        arr = np.load(p, allow_pickle=False) if p.suffix == ".npy" else np.loadtxt(p, delimiter=",", ndmin=1)
    except (OSError, ValueError) as exc:
        raise click.BadParameter(f"{path}: {exc}", param_hint="--sample") from None
    return np.asarray(arr, dtype=np.float64).ravel()


@click.command("tuner-plan")
@click.option("--pipeline", "pipeline_file", required=True, type=click.Path(dir_okay=False))
@click.option("--sample", required=True, type=click.Path(dir_okay=False),
              help="Arrival times in seconds: .npy, or one number per line.")
@click.option("--mu", multiple=True, required=True, help="STAGE=QPS single-replica throughput (every stage).")
@click.option("--replicas", multiple=True, help="STAGE=N planned replicas [default: the spec's].")
@click.option("--service-time-ms", type=float, default=None,
              help="Smallest envelope window [default: longest path's sum of 1/mu, >= 10 ms].")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False))
def tuner_plan_cmd(pipeline_file, sample, mu, replicas, service_time_ms, output) -> None:
    """Write the tuner plan (sample envelope, mu, visit ratios, replicas) the tuner reads."""
    pipe = _pipeline(pipeline_file)
    try:
        plan = planfile.plan_for_pipeline(pipe, _read_trace(sample), key_values(mu, float, "--mu", "STAGE=NUMBER"),
                                          key_values(replicas, int, "--replicas", "STAGE=NUMBER"),
                                          service_time_ms / 1000 if service_time_ms else None)
    except (planfile.PlanFileError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    planfile.save(plan, pipe.name, output)
    click.echo(f"wrote {output}: mean {plan.mean_rate_qps:.1f} qps, windows {plan.envelope.windows_s[0]:g}.."
               f"{plan.envelope.windows_s[-1]:g} s, replicas {plan.planned_replicas}")


@click.command("k8s-manifests")
@click.option("--pipeline", "pipeline_file", required=True, type=click.Path(dir_okay=False))
@click.option("--image", required=True, help="Container image with slipstream installed.")
@click.option("--namespace", default="default", show_default=True)
@click.option("--replicas", multiple=True, help="STAGE=N [default: the spec's].")
@click.option("--planner-mode", type=click.Choice(MODES), default="milp", show_default=True)
def k8s_manifests_cmd(pipeline_file, image, namespace, replicas, planner_mode) -> None:
    """Print every process the pipeline needs (kubectl apply -f -): the spec ConfigMap, a Deployment per
    stage, the join's when the pipeline has one, the planner and the tuner (with its RBAC)."""
    pipe = _pipeline(pipeline_file)
    docs = pipeline_manifests(pipe, Path(pipeline_file).read_text(), image=image, namespace=namespace,
                              replicas=key_values(replicas, int, "--replicas", "STAGE=NUMBER"),
                              planner_mode=planner_mode)
    click.echo(yaml.safe_dump_all(docs, sort_keys=False), nl=False)


commands = [tuner_cmd, up_cmd, tuner_plan_cmd, k8s_manifests_cmd]
