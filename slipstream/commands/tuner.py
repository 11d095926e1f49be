"""`slipstream tuner`, `slipstream up`, `slipstream tuner-plan`, `slipstream k8s-manifests`."""
from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path

import click

from slipstream.options import key_values, metrics_addr_option, state_default
import numpy as np
import yaml

from streams.config import KafkaSettings
from slipstream.specs import load_or_fail
from streams.spec import Pipeline
from tuner import planfile
from tuner.actuators import DryRunActuator
from tuner.run import run_tuner
from tuner.k8s import DEFAULT_BOOTSTRAP, Placement, default_placements, pipeline_manifests, read_profiles
from slipstream.commands.planner_service import MODES
from tuner.policy import ScaleDecision, TunerConfig, TunerPlan
from tuner.service import ServiceSettings, TunerService

log = logging.getLogger("slipstream.tuner")


def _pipeline(path: str) -> Pipeline:
    return load_or_fail(path, "--pipeline")


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
    metrics_addr_option(),
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
def tuner_cmd(pipeline_file, activation_s, max_replicas, rho_mode, interval_s, lookback_s, metrics_addr,
              reserve_cores, plan_file, wait_plan_s, dry_run, actuator, namespace) -> None:
    """Scale stage replicas from the live traffic envelope (InferLine's tuner). The plan comes from
    --plan, else from the planner's latest hand-off on the control topic; later hand-offs are followed."""
    pipe = _pipeline(pipeline_file)
    config = _config(activation_s, max_replicas, rho_mode)
    settings = KafkaSettings.from_env()
    plan, epoch = (_plan(plan_file, pipe), None) if plan_file else _plan_from_topic(pipe, settings, wait_plan_s)
    if not dry_run and actuator == "local":
        _up(pipe, pipeline_file, plan.planned_replicas, None, reserve_cores,
            _tuner_only(pipe, plan, config, settings, interval_s, lookback_s, metrics_addr, epoch))
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
                        lookback_s=lookback_s, stop=stop, metrics_addr=metrics_addr,
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


def _tuner_only(pipe, plan, config, settings, interval_s, lookback_s, metrics_addr, plan_epoch=None):
    from dataclasses import replace

    def control(actuator, max_instances):
        cfg = replace(config, max_replicas=min(config.max_replicas, max_instances))
        return lambda stop: run_tuner(pipe, plan, cfg, actuator, dry_run=False, settings=settings,
                                      interval_s=interval_s, lookback_s=lookback_s, stop=stop,
                                      metrics_addr=metrics_addr, max_instances=max_instances,
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
@click.option("--log-dir", default=state_default("workers"), show_default="STATE_DIR/workers",
              help="Worker stdout/stderr logs.")
def up_cmd(pipeline_file, activation_s, max_replicas, rho_mode, interval_s, lookback_s, metrics_addr,
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
        _tuner_only(pipe, plan, config, settings, interval_s, lookback_s, metrics_addr))


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
@click.option("--pipeline", "pipeline_file", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--image", required=True, help="Container image (deploy/docker/Dockerfile, target cpu).")
@click.option("--gpu-image", default=None, help="Image of the stages on cuda hardware (target cuda) [default: --image].")
@click.option("--profiles", "profiles_dir", required=True, type=click.Path(exists=True, file_okay=False),
              help="Profile store (slipstream profile --out) the planner reads; shipped as a ConfigMap.")
@click.option("--plan", "plan_file", default=None, type=click.Path(exists=True, dir_okay=False),
              help="A plan (slipstream plan --json): each stage's hardware and replicas [default: the spec's].")
@click.option("--replicas", multiple=True, help="STAGE=N, over the plan's or the spec's.")
@click.option("--namespace", default="default", show_default=True)
@click.option("--planner-mode", type=click.Choice(MODES), default="milp", show_default=True)
@click.option("--bootstrap", default=None,
              help=f"Kafka bootstrap address [default: the Strimzi cluster's, else {DEFAULT_BOOTSTRAP}].")
@click.option("--strimzi", "strimzi_cluster", default=None,
              help="Strimzi Kafka cluster name: add a KafkaTopic per topic (and no topic-creating init containers).")
@click.option("--topic-replicas", default=3, show_default=True, type=click.IntRange(min=1),
              help="With --strimzi: each topic's replication factor.")
@click.option("--strimzi-api", type=click.Choice(["v1", "v1beta2"]), default="v1", show_default=True,
              help="KafkaTopic API version: v1 (Strimzi >= 0.49) or v1beta2 (Strimzi < 1.0).")
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False),
              help="Write a kustomization directory here (kubectl apply -k DIR) instead of printing.")
def k8s_manifests_cmd(pipeline_file, image, gpu_image, profiles_dir, plan_file, replicas, namespace, planner_mode,
                      bootstrap, strimzi_cluster, topic_replicas, strimzi_api, out_dir) -> None:
    """Every object the pipeline runs on (kubectl apply -f -, or -k with --out): its ConfigMaps, a
    Deployment per stage sized by its hardware, the join's when the pipeline has one, the planner and
    the tuner (with its RBAC), and with --strimzi its topics. docs/kubernetes.md."""
    from tuner.kustomize import strimzi_topics, to_yaml, write_kustomization

    pipe = _pipeline(pipeline_file)
    place = _plan_placements(plan_file, pipe) if plan_file else default_placements(pipe)
    for stage, n in key_values(replicas, int, "--replicas", "STAGE=N").items():
        if stage not in place:
            raise click.BadParameter(f"no stage {stage!r}", param_hint="--replicas")
        place[stage] = Placement(place[stage].hardware, n)
    try:
        docs = pipeline_manifests(
            pipe, Path(pipeline_file).read_text(), image=image, gpu_image=gpu_image,
            profiles=read_profiles(profiles_dir), namespace=namespace, placements=place, planner_mode=planner_mode,
            bootstrap=bootstrap or (f"{strimzi_cluster}-kafka-bootstrap:9092" if strimzi_cluster else DEFAULT_BOOTSTRAP),
            create_topics=not strimzi_cluster)
        if strimzi_cluster:
            docs += strimzi_topics(pipe, strimzi_cluster, replicas=topic_replicas, namespace=namespace,
                                   api=strimzi_api)
        if out_dir:
            files = write_kustomization(out_dir, docs)
            click.echo(f"wrote {len(files)} files to {out_dir}: kubectl apply -k {out_dir}")
        else:
            click.echo(to_yaml(docs), nl=False)
    except (ValueError, FileExistsError) as exc:
        raise click.ClickException(str(exc)) from None


def _plan_placements(path: str, pipe: Pipeline) -> dict[str, Placement]:
    """Each stage's hardware (its primary assignment's, as the StageConfig says) and replicas from a
    ``slipstream plan --json`` file."""
    import json

    from planner.plan import Plan

    try:
        doc = json.loads(Path(path).read_text())
        if not doc.get("feasible"):
            raise ValueError(f"the plan is infeasible: {doc.get('reason')}")
        plans = Plan.from_dict(doc).stages
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise click.BadParameter(f"{path}: not a plan of slipstream plan --json: {exc}", param_hint="--plan") from None
    place = {sp.stage: Placement(sp.primary.hardware, sp.replicas) for sp in plans}
    if set(place) != {s.name for s in pipe.stages}:
        raise click.BadParameter(f"{path}: plans stages {sorted(place)}, the pipeline has "
                                 f"{sorted(s.name for s in pipe.stages)}", param_hint="--plan")
    return place


commands = [tuner_cmd, up_cmd, tuner_plan_cmd, k8s_manifests_cmd]
