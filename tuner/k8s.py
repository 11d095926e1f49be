"""Kubernetes: the manifests of every process a pipeline needs, and an actuator that scales stages.

``pipeline_manifests`` (``slipstream k8s-manifests`` prints it, or writes it as a kustomization with
``tuner.kustomize``) is the one source of every object; nothing under ``deploy/k8s`` repeats it. It
returns plain dicts:

- ConfigMaps, all generated: the pipeline spec (every pod mounts it), the broker address
  (``SLIPSTREAM_BOOTSTRAP``) and the planner's profile store (``slipstream profile --out``);
- one worker Deployment per stage, and the join worker's when the pipeline needs one (fan-out or several
  sinks). A stage's pod is sized by the hardware the planner chose for it (``Placement``, from a
  ``slipstream plan --json`` file, else the spec's default): CPU = the hardware's ``threads``, memory =
  its ``memory_gib``, requests = limits; ``cuda`` hardware adds one ``nvidia.com/gpu``, a GPU node
  selector and toleration, and the CUDA image;
- the planner service, pinned to those hardware choices (``--hardware STAGE=HW``: a pod cannot change
  its hardware, so live re-plans choose variants, batches and replicas only);
- the tuner service, whose Role may only get, patch and update the ``scale`` subresource of this
  pipeline's worker Deployments (what :class:`KubernetesActuator` calls, nothing more);
- the gateway (``tuner.k8s_gateway``): Deployment, Service and HorizontalPodAutoscaler.

Every pod runs as the image's non-root user (``RUN_AS``), with a read-only root filesystem (emptyDirs for
``/tmp`` and the model cache), no privilege escalation, no capabilities and the RuntimeDefault seccomp
profile, serves ``/metrics``, ``/healthz`` and ``/readyz`` on port 9100 (named ``metrics``; probes and
Prometheus scrape annotations point at it) and, unless Strimzi creates the topics, creates the missing
topics in an init container (``slipstream topics``). The ``kubernetes`` client (``pip install
slipstream[k8s]``) is imported only when the actuator is built.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from streams.spec import Hardware, Pipeline

LABEL = "slipstream.io"
METRICS_PORT = 9100
METRICS_ADDR = f"0.0.0.0:{METRICS_PORT}"
SPEC_DIR = "/etc/slipstream"
SPEC_PATH = f"{SPEC_DIR}/pipeline.yaml"
PROFILES_DIR = "/var/lib/slipstream/profiles"
HOME = "/home/slipstream"  # the image's user (deploy/docker/Dockerfile)
RUN_AS = 10001
GPU_RESOURCE = "nvidia.com/gpu"
GPU_NODE_SELECTOR = {"nvidia.com/gpu.present": "true"}  # NVIDIA GPU feature discovery's node label
GPU_TOLERATIONS = [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
DEFAULT_BOOTSTRAP = "kafka.kafka.svc.cluster.local:9092"
CONFIGMAP_MAX_BYTES = 1_000_000  # the API server's limit is 1 MiB for the whole object
# The tuner's Role: exactly what KubernetesActuator calls (read and patch the scale subresource).
SCALE_RULE = {"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["get", "patch", "update"]}
# Processes that run no model: the join worker, the planner, the tuner.
SMALL = {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}


@dataclass(frozen=True)
class Placement:
    """Where a stage runs: a hardware of the pipeline's catalog, and how many replicas."""

    hardware: str
    replicas: int


def deployment_name(pipeline: str, role: str) -> str:
    """A stage's, the join's, the planner's or the tuner's Deployment."""
    return f"slipstream-{pipeline}-{role}"[:63].rstrip("-")


def scale_patch(replicas: int) -> dict[str, Any]:
    """The body of a PATCH to a Deployment's scale subresource."""
    if replicas < 0:
        raise ValueError(f"replicas must be >= 0, got {replicas}")
    return {"spec": {"replicas": int(replicas)}}


def hardware_resources(hw: Hardware) -> dict[str, Any]:
    """A replica's resources on ``hw``: its threads as CPUs, its memory, one GPU on ``cuda``;
    requests equal limits (the Guaranteed class: latency as profiled)."""
    mib = round(hw.memory_gib * 1024)
    res: dict[str, Any] = {"cpu": str(hw.threads), "memory": f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"}
    if hw.kind == "cuda":
        res[GPU_RESOURCE] = 1
    return {"requests": dict(res), "limits": dict(res)}


# ---------------------------------------------------------------------------------------- pod parts


def _meta(name: str, pipeline: str, namespace: str, **labels: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": {f"{LABEL}/pipeline": pipeline, **labels}}


def _env(pipeline: str) -> list[dict[str, Any]]:
    return [{"name": "SLIPSTREAM_BOOTSTRAP",
             "valueFrom": {"configMapKeyRef": {"name": kafka_configmap_name(pipeline), "key": "bootstrap"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "MPLCONFIGDIR", "value": "/tmp/matplotlib"}]


def _mounts() -> list[dict[str, Any]]:
    return [{"name": "pipeline", "mountPath": SPEC_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "cache", "mountPath": f"{HOME}/.cache"}]


def _volumes(pipeline: str) -> list[dict[str, Any]]:
    return [{"name": "pipeline", "configMap": {"name": spec_configmap_name(pipeline)}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
            {"name": "cache", "emptyDir": {"sizeLimit": "4Gi"}}]


CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
                      "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
POD_SECURITY = {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS, "fsGroup": RUN_AS,
                "seccompProfile": {"type": "RuntimeDefault"}}
PROBES = {
    # /healthz answers while the process runs; a model may take minutes to load and warm before it does
    "startupProbe": {"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 5,
                     "failureThreshold": 120},
    "livenessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 10,
                      "failureThreshold": 3},
    # /readyz: model warmed and partitions assigned (a worker), plan in hand (the tuner)
    "readinessProbe": {"httpGet": {"path": "/readyz", "port": "metrics"}, "periodSeconds": 5,
                       "failureThreshold": 2},
}
SCRAPE = {"prometheus.io/scrape": "true", "prometheus.io/port": str(METRICS_PORT), "prometheus.io/path": "/metrics"}


def _container(name: str, image: str, pipeline: str, args: list[str], resources: dict[str, Any],
               mounts: list[dict[str, Any]] = ()) -> dict[str, Any]:
    return {"name": name, "image": image, "args": [*args, "--metrics-addr", METRICS_ADDR],
            "env": _env(pipeline), "ports": [{"name": "metrics", "containerPort": METRICS_PORT}],
            "resources": resources, **PROBES, "securityContext": dict(CONTAINER_SECURITY),
            "volumeMounts": [*_mounts(), *mounts]}


def _topics_init(pipeline: str, image: str) -> dict[str, Any]:
    """Creates the pipeline's missing topics before the process starts (idempotent, any pod may run it)."""
    return {"name": "topics", "image": image, "args": ["topics", "--pipeline", SPEC_PATH],
            "env": _env(pipeline), "resources": SMALL, "securityContext": dict(CONTAINER_SECURITY),
            "volumeMounts": _mounts()}


def _deployment(name: str, pipeline: str, namespace: str, role_labels: dict[str, str], replicas: int,
                containers: list[dict[str, Any]], *, topics_image: str | None, volumes=(), extra_labels=None,
                service_account: str | None = None, node: dict[str, Any] | None = None,
                single: bool = False) -> dict[str, Any]:
    selector = {f"{LABEL}/pipeline": pipeline, **role_labels}
    # the selector is immutable: what may change on a re-render (the hardware) is a label only
    extra = extra_labels or {}
    labels = {**selector, **extra, "app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "slipstream"}
    pod: dict[str, Any] = {
        # scale-down removes pods; a long grace lets a worker finish its batch, produce and commit
        "terminationGracePeriodSeconds": 30,
        "automountServiceAccountToken": service_account is not None,
        "securityContext": dict(POD_SECURITY),
        "containers": containers,
        "volumes": [*_volumes(pipeline), *volumes],
        **(node or {}),
    }
    if service_account:
        pod["serviceAccountName"] = service_account
    if topics_image:
        pod["initContainers"] = [_topics_init(pipeline, topics_image)]
    spec: dict[str, Any] = {"replicas": int(replicas), "selector": {"matchLabels": selector}}
    if single:  # one decision maker per pipeline: never two during a rollout
        spec["strategy"] = {"type": "Recreate"}
    spec["template"] = {"metadata": {"labels": labels, "annotations": dict(SCRAPE)}, "spec": pod}
    return _plain({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": _meta(name, pipeline, namespace, **role_labels, **extra), "spec": spec})


def _plain(obj: Any) -> Any:
    """A copy sharing nothing with the constants (YAML would write shared parts as anchors)."""
    return json.loads(json.dumps(obj))


# ---------------------------------------------------------------------------------------- objects


def worker_deployment(pipe: Pipeline, role: str, placement: Placement | None, *, image: str, gpu_image: str,
                      namespace: str = "default", create_topics: bool = True) -> dict[str, Any]:
    """A stage's worker Deployment on ``placement`` (``role="join"``, no placement: the join worker)."""
    hw = pipe.hardware[placement.hardware] if placement else None
    gpu = hw is not None and hw.kind == "cuda"
    img = gpu_image if gpu else image
    c = _container("worker", img, pipe.name, ["worker", "--pipeline", SPEC_PATH, "--stage", role],
                   hardware_resources(hw) if hw else SMALL)
    node = {"nodeSelector": dict(GPU_NODE_SELECTOR), "tolerations": list(GPU_TOLERATIONS)} if gpu else None
    return _deployment(deployment_name(pipe.name, role), pipe.name, namespace, {f"{LABEL}/stage": role},
                       placement.replicas if placement else 1, [c], node=node,
                       extra_labels={f"{LABEL}/hardware": hw.name} if hw else None,
                       topics_image=img if create_topics else None)


def planner_deployment(pipe: Pipeline, placements: Mapping[str, Placement], profile_files: Iterable[str], *,
                       image: str, mode: str = "milp", namespace: str = "default",
                       create_topics: bool = True) -> dict[str, Any]:
    """The planner service: re-plans from live arrivals and publishes StageConfigs and the tuner's
    hand-off on the control topic, each stage pinned to the hardware its Deployment has. It reads the
    profile store ``profile_files`` from the profiles ConfigMap."""
    pins = [a for s, p in placements.items() for a in ("--hardware", f"{s}={p.hardware}")]
    c = _container("planner", image, pipe.name, ["planner", "--pipeline", SPEC_PATH, "--profiles", PROFILES_DIR,
                                                 "--mode", mode, *pins], SMALL,
                   [{"name": "profiles", "mountPath": PROFILES_DIR, "readOnly": True}])
    profiles = {"name": "profiles", "configMap": {"name": profiles_configmap_name(pipe.name), "items": [
        {"key": _key(f), "path": f} for f in sorted(profile_files)]}}
    return _deployment(deployment_name(pipe.name, "planner"), pipe.name, namespace, {f"{LABEL}/role": "planner"},
                       1, [c], volumes=[profiles], single=True, topics_image=image if create_topics else None)


def tuner_manifests(pipe: Pipeline, *, image: str, namespace: str = "default") -> list[dict[str, Any]]:
    """The tuner service and its RBAC: ServiceAccount, Role (the scale subresource of this pipeline's
    workers only), RoleBinding, Deployment. Its plans come from the planner on the control topic."""
    name = deployment_name(pipe.name, "tuner")
    workers = sorted(deployment_name(pipe.name, s.name) for s in pipe.stages)
    c = _container("tuner", image, pipe.name, ["tuner", "--pipeline", SPEC_PATH, "--actuator", "k8s",
                                               "--namespace", "$(POD_NAMESPACE)"], SMALL)
    return _plain([
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name, pipe.name, namespace)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(name, pipe.name, namespace),
         "rules": [{**SCALE_RULE, "resourceNames": workers}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": _meta(name, pipe.name, namespace),
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}},
        _deployment(name, pipe.name, namespace, {f"{LABEL}/role": "tuner"}, 1, [c], service_account=name,
                    single=True, topics_image=None),
    ])


def spec_configmap_name(pipeline: str) -> str:
    return f"slipstream-{pipeline}-spec"


def kafka_configmap_name(pipeline: str) -> str:
    return f"slipstream-{pipeline}-kafka"


def profiles_configmap_name(pipeline: str) -> str:
    return f"slipstream-{pipeline}-profiles"


def _configmap(name: str, pipeline: str, namespace: str, data: Mapping[str, str]) -> dict[str, Any]:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(name, pipeline, namespace), "data": dict(data)}
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
                       gpu_image: str | None = None, namespace: str = "default",
                       placements: Mapping[str, Placement] | None = None, planner_mode: str = "milp",
                       bootstrap: str = DEFAULT_BOOTSTRAP, create_topics: bool = True) -> list[dict[str, Any]]:
    """Everything a pipeline runs on: its ConfigMaps, every worker (``Pipeline.worker_roles``: the stages
    and, when needed, the join), the planner and the tuner. ``gpu_image`` (default ``image``) runs the
    stages placed on ``cuda`` hardware."""
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
                                      namespace=namespace, create_topics=create_topics))
    docs.append(planner_deployment(pipe, place, profiles, image=image, mode=planner_mode, namespace=namespace,
                                   create_topics=create_topics))
    from tuner.k8s_gateway import gateway_manifests  # its own module; it imports this one's pod parts

    return docs + tuner_manifests(pipe, image=image, namespace=namespace) + gateway_manifests(
        pipe, image=image, namespace=namespace, create_topics=create_topics)


class KubernetesActuator:
    """Scales ``deployment_name(pipeline, stage)`` in ``namespace`` through the scale subresource: reads
    and patches ``deployments/scale``, the only thing the tuner's Role (``SCALE_RULE``) allows. ``apps``
    is a ``kubernetes.client.AppsV1Api`` (default: one configured in-cluster, else from kubeconfig)."""

    def __init__(self, pipeline: str, namespace: str = "default", *, in_cluster: bool | None = None,
                 apps: Any = None) -> None:
        self.pipeline = pipeline
        self.namespace = namespace
        self._apps = apps if apps is not None else _apps_api(in_cluster)

    def set_replicas(self, stage: str, n: int) -> None:
        self._apps.patch_namespaced_deployment_scale(
            deployment_name(self.pipeline, stage), self.namespace, scale_patch(n))

    def replicas(self, stage: str) -> int:
        scale = self._apps.read_namespaced_deployment_scale(deployment_name(self.pipeline, stage),
                                                            self.namespace)
        return int(scale.spec.replicas or 0)


def _apps_api(in_cluster: bool | None) -> Any:
    try:
        from kubernetes import client, config  # optional dependency
    except ImportError as exc:
        raise RuntimeError("KubernetesActuator needs the kubernetes client: pip install 'slipstream[k8s]' "
                           "(kubernetes==37.0.2)") from exc
    if in_cluster is None:
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
    elif in_cluster:
        config.load_incluster_config()
    else:
        config.load_kube_config()
    return client.AppsV1Api()
