"""`slipstream k8s-manifests`: every Kubernetes object a pipeline runs on (``slipstream.k8s_manifests``)."""
from __future__ import annotations

from pathlib import Path

import click

from slipstream.k8s_manifests import (DEFAULT_BOOTSTRAP, MAX_POD_CPUS, Placement, default_placements,
                                      pipeline_manifests, read_profiles)
from slipstream.planner.modes import MODES
from slipstream.options import key_values
from slipstream.tuner_options import pipeline_of
from slipstream.streams.spec import Pipeline


@click.command("k8s-manifests")
@click.option("--pipeline", "pipeline_file", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--image", required=True, help="Stage workers' image (deploy/docker/Dockerfile, target cpu).")
@click.option("--control-image", default=None,
              help="The planner's and the tuner's image (target control: the solver and the kubernetes "
                   "client) [default: --image, which must then be built with them].")
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
@click.option("--max-pod-cpus", default=MAX_POD_CPUS, show_default=True, type=click.IntRange(min=1),
              help="Largest worker pod: a stage's pod holds the most replicas (a divisor of its planned "
                   "replicas) whose threads fit this many CPUs.")
@click.option("--standby", default=0, show_default=True, type=click.IntRange(min=0),
              help="Warm pods per stage and join beyond what their replicas need, holding the model: a killed "
                   "pod's partitions move to one within the group's session timeout instead of waiting for a new "
                   "pod. Each costs a pod's requests (docs/kubernetes.md).")
def k8s_manifests_cmd(pipeline_file, image, control_image, gpu_image, profiles_dir, plan_file, replicas, namespace, planner_mode,
                      bootstrap, strimzi_cluster, topic_replicas, strimzi_api, out_dir, max_pod_cpus, standby) -> None:
    """Every object the pipeline runs on (kubectl apply -f -, or -k with --out): its ConfigMaps, a
    Deployment per stage sized by its hardware, the join's when the pipeline has one, the planner and
    the tuner (with its RBAC), and with --strimzi its topics. docs/kubernetes.md."""
    from slipstream.kustomize import strimzi_topics, to_yaml, write_kustomization

    pipe = pipeline_of(pipeline_file)
    place = _plan_placements(plan_file, pipe) if plan_file else default_placements(pipe)
    for stage, n in key_values(replicas, int, "--replicas", "STAGE=N").items():
        if stage not in place:
            raise click.BadParameter(f"no stage {stage!r}", param_hint="--replicas")
        place[stage] = Placement(place[stage].hardware, n)
    try:
        docs = pipeline_manifests(
            pipe, Path(pipeline_file).read_text(), image=image, gpu_image=gpu_image, control_image=control_image,
            profiles=read_profiles(profiles_dir), namespace=namespace, placements=place, planner_mode=planner_mode,
            bootstrap=bootstrap or (f"{strimzi_cluster}-kafka-bootstrap:9092" if strimzi_cluster else DEFAULT_BOOTSTRAP),
            create_topics=not strimzi_cluster, max_pod_cpus=max_pod_cpus, standby=standby)
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

    from slipstream.planner.plan import Plan

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


commands = [k8s_manifests_cmd]
