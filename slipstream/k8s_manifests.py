"""Kubernetes: the manifests of every process a pipeline needs (docs/kubernetes.md).

``pipeline_manifests`` (``slipstream k8s-manifests`` prints it, or writes it as a kustomization with
``slipstream.kustomize``) is the one source of every object; nothing under ``deploy/k8s`` repeats it.
The tuner's actuator that scales the worker Deployments is ``slipstream.tuner.k8s``. It returns plain dicts:

- ConfigMaps, all generated: the pipeline spec (every pod mounts it), the broker address
  (``SLIPSTREAM_BOOTSTRAP``) and the planner's profile store (``slipstream profile --out``);
- one worker Deployment per stage, and the join worker's when the pipeline needs one (fan-out or several
  sinks). A stage's pod is one worker process holding up to ``k`` replicas (``--max-replicas k``;
  ``pod_replicas``: the largest divisor of the planned replicas whose pod fits ``max_pod_cpus``,
  1 on ``cuda``), on the hardware the planner chose (``Placement``, from a ``slipstream plan --json``
  file, else the spec's default): CPU = ``k`` times the hardware's ``threads``, memory = ``k`` times
  its ``memory_gib``, requests = limits; ``cuda`` hardware adds one ``nvidia.com/gpu``, a GPU node
  selector and toleration, and the CUDA image. A stage's Deployment has no ``spec.replicas``: the
  tuner owns it (``slipstream.tuner.k8s``) and sets ``layout(n, k).workers`` pods for ``n`` replicas;
- the planner service, pinned to those hardware choices (``--hardware STAGE=HW``: a pod cannot change
  its hardware, so live re-plans choose variants, batches and replicas only);
- the tuner service (``--pod-replicas STAGE=k`` for each stage), whose Role may only get and patch
  the ``scale`` subresource of this pipeline's stage Deployments (what ``slipstream.tuner.k8s`` calls).

Every pod runs as the image's non-root user (``RUN_AS``), with a read-only root filesystem (emptyDirs for
``/tmp`` and the model cache), no privilege escalation, no capabilities and the RuntimeDefault seccomp
profile, serves ``/metrics``, ``/healthz`` and ``/readyz`` on port 9100 (named ``metrics``; probes and
Prometheus scrape annotations point at it) and, unless Strimzi creates the topics, creates the missing
topics in an init container (``slipstream topics``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Iterable, Mapping

from slipstream.k8s_gateway import gateway_manifests
from slipstream.k8s_pods import (CONTAINER_SECURITY, LABEL, SMALL, SPEC_PATH, container, deployment,
                                 kafka_configmap_name, object_meta, spec_mounts, plain, spec_configmap_name)
from slipstream.model_fetch import fetched_models
from slipstream.streams.spec import Hardware, Pipeline
from slipstream.tuner.k8s import SCALE_RULE, deployment_name

PROFILES_DIR = "/var/lib/slipstream/profiles"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_NODE_SELECTOR = {"nvidia.com/gpu.present": "true"}  # NVIDIA GPU feature discovery's node label
GPU_TOLERATIONS = [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
DEFAULT_BOOTSTRAP = "kafka.kafka.svc.cluster.local:9092"
CONFIGMAP_MAX_BYTES = 1_000_000  # the API server's limit is 1 MiB for the whole object
MAX_POD_CPUS = 8  # the largest worker pod pod_replicas makes by default
# Processes that run no model: the join worker, the planner, the tuner.


@dataclass(frozen=True)
class Placement:
    """Where a stage runs: a hardware of the pipeline's catalog, and how many replicas."""

    hardware: str
    replicas: int


def pod_replicas(replicas: int, hw: Hardware, max_pod_cpus: int = MAX_POD_CPUS) -> int:
    """Replicas per pod of a stage planned at ``replicas`` on ``hw``: the largest divisor of
    ``replicas`` whose threads fit ``max_pod_cpus`` (so the planned count is met exactly, in the
    fewest pods), at least 1; 1 on ``cuda`` (one GPU per replica, as profiled)."""
    if replicas < 1 or max_pod_cpus < 1:
        raise ValueError(f"need replicas >= 1 and max_pod_cpus >= 1, got {replicas}, {max_pod_cpus}")
    if hw.kind == "cuda":
        return 1
    return max(d for d in range(1, replicas + 1) if replicas % d == 0 and (d * hw.threads <= max_pod_cpus or d == 1))


def hardware_resources(hw: Hardware, replicas: int = 1) -> dict[str, Any]:
    """A pod's resources for ``replicas`` on ``hw``: their threads as CPUs, their memory, one GPU on
    ``cuda``; requests equal limits (the Guaranteed class: latency as profiled)."""
    mib = round(hw.memory_gib * 1024 * replicas)
    res: dict[str, Any] = {"cpu": str(hw.threads * replicas),
                           "memory": f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"}
    if hw.kind == "cuda":
        res[GPU_RESOURCE] = 1
    return {"requests": dict(res), "limits": dict(res)}


# ---------------------------------------------------------------------------------------- objects


def worker_deployment(pipe: Pipeline, role: str, placement: Placement | None, *, image: str, gpu_image: str,
                      namespace: str = "default", create_topics: bool = True, max_pod_cpus: int = MAX_POD_CPUS,
                      standby: int = 0) -> dict[str, Any]:
    """A stage's worker Deployment on ``placement`` (``role="join"``, no placement: the join worker,
    one pod and ``standby`` warm ones). A stage's has no ``spec.replicas`` (the tuner's) and
    ``pod_replicas`` per pod."""
    hw = pipe.hardware[placement.hardware] if placement else None
    gpu = hw is not None and hw.kind == "cuda"
    img = gpu_image if gpu else image
    k = pod_replicas(placement.replicas, hw, max_pod_cpus) if hw else 1
    args = ["worker", "--pipeline", SPEC_PATH, "--stage", role, *(["--max-replicas", str(k)] if hw else [])]
    inits, mounts, volumes = model_fetches(pipe, role, img) if hw else ([], [], [])
    c = container("worker", img, pipe.name, args, hardware_resources(hw, k) if hw else SMALL, mounts)
    node = {"nodeSelector": dict(GPU_NODE_SELECTOR), "tolerations": list(GPU_TOLERATIONS)} if gpu else None
    dep = deployment(deployment_name(pipe.name, role), pipe.name, namespace, {f"{LABEL}/stage": role},
                      None if hw else 1 + standby, [c], node=node, volumes=volumes,
                      extra_labels={f"{LABEL}/hardware": hw.name} if hw else None,
                      topics_image=img if create_topics else None)
    if inits:
        spec = dep["spec"]["template"]["spec"]
        spec["initContainers"] = [*spec.get("initContainers", []), *inits]
    return dep


def model_fetches(pipe: Pipeline, stage: str, image: str) -> tuple[list, list, list]:
    """(init containers, worker mounts, volumes) delivering the stage's models named by a URI
    (``params.uri``; ``slipstream fetch-model`` checks the sha256 ``params.digest``) into emptyDirs
    mounted read-only at their ``params.path``'s directory."""
    fetches = fetched_models({v.name: v.params for v in pipe.stage(stage).variants})
    dirs = sorted({str(PurePosixPath(path).parent) for *_, path in fetches})
    vol = {d: f"models-{i}" for i, d in enumerate(dirs)}
    inits = [{"name": f"model-{i}", "image": image,
              "args": ["fetch-model", "--uri", uri, "--sha256", sha, "--out", path],
              "resources": SMALL, "securityContext": dict(CONTAINER_SECURITY),
              "volumeMounts": [*spec_mounts(), {"name": vol[str(PurePosixPath(path).parent)],
                                            "mountPath": str(PurePosixPath(path).parent)}]}
             for i, (_, uri, sha, path) in enumerate(fetches)]
    mounts = [{"name": vol[d], "mountPath": d, "readOnly": True} for d in dirs]
    volumes = [{"name": vol[d], "emptyDir": {"sizeLimit": "8Gi"}} for d in dirs]
    return plain(inits), mounts, volumes


def planner_deployment(pipe: Pipeline, placements: Mapping[str, Placement], profile_files: Iterable[str], *,
                       image: str, mode: str = "milp", namespace: str = "default",
                       create_topics: bool = True) -> dict[str, Any]:
    """The planner service: re-plans from live arrivals and publishes StageConfigs and the tuner's
    hand-off on the control topic, each stage pinned to the hardware its Deployment has. It reads the
    profile store ``profile_files`` from the profiles ConfigMap."""
    pins = [a for s, p in placements.items() for a in ("--hardware", f"{s}={p.hardware}")]
    c = container("planner", image, pipe.name, ["planner", "--pipeline", SPEC_PATH, "--profiles", PROFILES_DIR,
                                                 "--mode", mode, *pins], SMALL,
                   [{"name": "profiles", "mountPath": PROFILES_DIR, "readOnly": True}])
    profiles = {"name": "profiles", "configMap": {"name": profiles_configmap_name(pipe.name), "items": [
        {"key": _key(f), "path": f} for f in sorted(profile_files)]}}
    return deployment(deployment_name(pipe.name, "planner"), pipe.name, namespace, {f"{LABEL}/role": "planner"},
                       1, [c], volumes=[profiles], single=True, topics_image=image if create_topics else None)


def tuner_manifests(pipe: Pipeline, per_pod: Mapping[str, int], *, image: str,
                    namespace: str = "default", standby: int = 0) -> list[dict[str, Any]]:
    """The tuner service and its RBAC: ServiceAccount, Role (the scale subresource of this pipeline's
    stage workers only), RoleBinding, Deployment. Its plans come from the planner on the control topic;
    ``per_pod``: each stage's replicas per pod (its workers' ``--max-replicas``); ``standby``: warm
    pods per stage beyond them (``slipstream.tuner.k8s``)."""
    name = deployment_name(pipe.name, "tuner")
    workers = sorted(deployment_name(pipe.name, s.name) for s in pipe.stages)
    pod_args = [a for s, k in per_pod.items() for a in ("--pod-replicas", f"{s}={k}")]
    c = container("tuner", image, pipe.name, ["tuner", "--pipeline", SPEC_PATH, "--actuator", "k8s",
                                               "--namespace", "$(POD_NAMESPACE)", "--standby", str(standby),
                                               *pod_args], SMALL)
    return plain([
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": object_meta(name, pipe.name, namespace)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": object_meta(name, pipe.name, namespace),
         "rules": [{**SCALE_RULE, "resourceNames": workers}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": object_meta(name, pipe.name, namespace),
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}},
        deployment(name, pipe.name, namespace, {f"{LABEL}/role": "tuner"}, 1, [c], service_account=name,
                    single=True, topics_image=None),
    ])


def profiles_configmap_name(pipeline: str) -> str:
    return f"slipstream-{pipeline}-profiles"


def _configmap(name: str, pipeline: str, namespace: str, data: Mapping[str, str]) -> dict[str, Any]:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": object_meta(name, pipeline, namespace), "data": dict(data)}
    size = sum(len(k) + len(v.encode()) for k, v in data.items())
    if size > CONFIGMAP_MAX_BYTES:
        raise ValueError(f"ConfigMap {name}: {size} bytes of data, more than {CONFIGMAP_MAX_BYTES}")
    return cm


def pipeline_configmap(pipeline: str, spec_text: str, namespace: str = "default") -> dict[str, Any]:
    """The ConfigMap holding the pipeline spec that every pod mounts."""
    return _configmap(spec_configmap_name(pipeline), pipeline, namespace, {"pipeline.yaml": spec_text})


def kafka_configmap(pipeline: str, bootstrap: str, namespace: str = "default") -> dict[str, Any]:
    """The broker address every pod reads as ``SLIPSTREAM_BOOTSTRAP``."""
    return _configmap(kafka_configmap_name(pipeline), pipeline, namespace, {"bootstrap": bootstrap})


def profiles_configmap(pipeline: str, profiles: Mapping[str, str], namespace: str = "default") -> dict[str, Any]:
    """The profile store (file name -> JSON). Keys may not hold '@', so each file is an item whose key
    is the name with '@' spelled ``.at.`` and whose path is the name itself."""
    return _configmap(profiles_configmap_name(pipeline), pipeline, namespace,
                      {_key(n): t for n, t in sorted(profiles.items())})


def _key(file_name: str) -> str:
    key = file_name.replace("@", ".at.")
    if not re.fullmatch(r"[-._a-zA-Z0-9]+", key):
        raise ValueError(f"profile file {file_name!r}: not a ConfigMap key even with '@' spelled '.at.'")
    return key


def read_profiles(root: str | Path) -> dict[str, str]:
    """The profile store's files (``variant@hardware.json``) by name."""
    files = {p.name: p.read_text() for p in sorted(Path(root).glob("*@*.json"))}
    if not files:
        raise ValueError(f"{root}: no profiles (variant@hardware.json): run slipstream profile --out {root}")
    return files


def default_placements(pipe: Pipeline, replicas: Mapping[str, int] | None = None) -> dict[str, Placement]:
    """Each stage on its spec default hardware, with the spec's (or the given) replicas."""
    reps = replicas or {}
    return {s.name: Placement(s.defaults.hardware, reps.get(s.name, s.defaults.replicas)) for s in pipe.stages}


def pipeline_manifests(pipe: Pipeline, spec_text: str, *, image: str, profiles: Mapping[str, str],
                       gpu_image: str | None = None, control_image: str | None = None, namespace: str = "default",
                       placements: Mapping[str, Placement] | None = None, planner_mode: str = "milp",
                       bootstrap: str = DEFAULT_BOOTSTRAP, create_topics: bool = True,
                       max_pod_cpus: int = MAX_POD_CPUS, standby: int = 0) -> list[dict[str, Any]]:
    """Everything a pipeline runs on: its ConfigMaps, every worker (``Pipeline.worker_roles``: the stages
    and, when needed, the join), the planner, the tuner and the gateway. ``gpu_image`` (default ``image``) runs the
    stages placed on ``cuda`` hardware, ``control_image`` (default ``image``; the Dockerfile's target
    ``control``) the planner and the tuner. ``standby``: warm pods per stage and join beyond what their
    replicas need (the tuner keeps the stages'; ``slipstream.tuner.k8s``)."""
    place = dict(placements or default_placements(pipe))
    missing = sorted({s.name for s in pipe.stages} - set(place))
    unknown = sorted(p.hardware for p in place.values() if p.hardware not in pipe.hardware)
    if missing or unknown or set(place) - {s.name for s in pipe.stages}:
        raise ValueError(f"placements: stages without one {missing}, unknown stages "
                         f"{sorted(set(place) - {s.name for s in pipe.stages})}, unknown hardware {unknown} "
                         f"(catalog: {sorted(pipe.hardware)})")
    docs = [kafka_configmap(pipe.name, bootstrap, namespace), pipeline_configmap(pipe.name, spec_text, namespace),
            profiles_configmap(pipe.name, profiles, namespace)]
    for role in pipe.worker_roles({s: p.replicas for s, p in place.items()}):
        docs.append(worker_deployment(pipe, role, place.get(role), image=image, gpu_image=gpu_image or image,
                                      namespace=namespace, create_topics=create_topics, max_pod_cpus=max_pod_cpus,
                                      standby=standby))
    control = control_image or image
    docs.append(planner_deployment(pipe, place, profiles, image=control, mode=planner_mode, namespace=namespace,
                                   create_topics=create_topics))
    per_pod = {s: pod_replicas(p.replicas, pipe.hardware[p.hardware], max_pod_cpus) for s, p in place.items()}

    tuner = tuner_manifests(pipe, per_pod, image=control, namespace=namespace, standby=standby)
    return docs + tuner + gateway_manifests(pipe, image=image, namespace=namespace, create_topics=create_topics)
