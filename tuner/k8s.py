"""Kubernetes: the manifests of every process a pipeline needs, and an actuator that scales stages.

``pipeline_manifests`` (``slipstream k8s-manifests`` prints it) returns plain dicts for
``kubectl apply -f -``: the pipeline spec ConfigMap, one worker Deployment per stage, the join worker's
Deployment when the pipeline needs one (fan-out or several sinks: without it those requests never get
a result), the planner service and the tuner service (with the RBAC it needs to scale Deployments).
Each worker Deployment runs ``slipstream worker --pipeline /etc/slipstream/pipeline.yaml --stage NAME``
(``deploy/k8s/stage-deployment.yaml`` is its template) with the spec mounted from the ConfigMap, the
broker address in ``SLIPSTREAM_BOOTSTRAP`` (from the ``slipstream-kafka`` ConfigMap,
``deploy/k8s/kafka-configmap.yaml``) and Prometheus scrape annotations on the pod. Two inputs come
from the operator: the planner's profile store on the PersistentVolumeClaim
``slipstream-<pipeline>-profiles`` (``slipstream profile --out``) and the broker address. The tuner
takes its plans from the planner on the control topic (the latest ``TunerHandoff`` at start, waiting
for the first, then every later one), so it mounts no plan file.

:class:`KubernetesActuator` patches the Deployment's ``scale`` subresource. The ``kubernetes`` client
(``pip install slipstream[k8s]``, kubernetes==37.0.2) is imported only when the actuator is built.
"""
from __future__ import annotations

from typing import Any, Mapping

from streams.spec import Pipeline

LABEL = "slipstream.io"
METRICS_PORT = 9100
TUNER_METRICS_PORT = 9101
SPEC_DIR = "/etc/slipstream"
SPEC_PATH = f"{SPEC_DIR}/pipeline.yaml"
PROFILES_DIR = "/var/lib/slipstream/profiles"


def deployment_name(pipeline: str, role: str) -> str:
    """A stage's, the join's, the planner's or the tuner's Deployment."""
    return f"slipstream-{pipeline}-{role}"[:63].rstrip("-")


def scale_patch(replicas: int) -> dict[str, Any]:
    """The body of a PATCH to a Deployment's scale subresource."""
    if replicas < 0:
        raise ValueError(f"replicas must be >= 0, got {replicas}")
    return {"spec": {"replicas": int(replicas)}}


def _bootstrap_env() -> dict[str, Any]:
    return {"name": "SLIPSTREAM_BOOTSTRAP",
            "valueFrom": {"configMapKeyRef": {"name": "slipstream-kafka", "key": "bootstrap"}}}


def _spec_volume(pipeline: str) -> dict[str, Any]:
    return {"name": "pipeline", "configMap": {"name": f"slipstream-{pipeline}-spec"}}


def _spec_mount() -> dict[str, Any]:
    return {"name": "pipeline", "mountPath": SPEC_DIR, "readOnly": True}


def _deployment(name: str, namespace: str, labels: dict[str, str], selector: dict[str, str], replicas: int,
                pod_spec: dict[str, Any], metrics_port: int | None, strategy: dict | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicas": int(replicas), "selector": {"matchLabels": dict(selector)}}
    if strategy:
        spec["strategy"] = strategy
    meta: dict[str, Any] = {"labels": dict(labels)}
    if metrics_port is not None:
        meta["annotations"] = {"prometheus.io/scrape": "true", "prometheus.io/port": str(metrics_port),
                               "prometheus.io/path": "/metrics"}
    spec["template"] = {"metadata": meta, "spec": pod_spec}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)}, "spec": spec}


def stage_deployment(pipeline: str, stage: str, *, image: str, replicas: int, namespace: str = "default",
                     cpu: str = "1", memory: str = "2Gi", gpus: int = 0,
                     metrics_port: int = METRICS_PORT) -> dict[str, Any]:
    """A worker's Deployment, for a stage or (``stage="join"``) the join (see
    ``deploy/k8s/stage-deployment.yaml``)."""
    name = deployment_name(pipeline, stage)
    selector = {f"{LABEL}/pipeline": pipeline, f"{LABEL}/stage": stage}
    limits: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if gpus:
        limits["nvidia.com/gpu"] = gpus
    container = {
        "name": "worker",
        "image": image,
        "args": ["worker", "--pipeline", SPEC_PATH, "--stage", stage],
        "env": [
            _bootstrap_env(),
            {"name": "SLIPSTREAM_METRICS_PORT", "value": str(metrics_port)},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        "ports": [{"name": "metrics", "containerPort": metrics_port}],
        "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": limits},
        "volumeMounts": [_spec_mount()],
    }
    # scale-down removes pods; a long grace lets a worker finish its batch and commit
    pod = {"terminationGracePeriodSeconds": 30, "containers": [container], "volumes": [_spec_volume(pipeline)]}
    return _deployment(name, namespace, {**selector, "app.kubernetes.io/name": name}, selector, replicas,
                       pod, metrics_port)


def planner_deployment(pipeline: str, *, image: str, mode: str = "milp",
                       namespace: str = "default") -> dict[str, Any]:
    """The planner service: re-plans from live arrivals and publishes StageConfigs and the tuner's
    hand-off on the control topic. Reads the profile store from the ``-profiles`` claim."""
    labels = {f"{LABEL}/pipeline": pipeline, f"{LABEL}/role": "planner"}
    container = {
        "name": "planner", "image": image,
        "args": ["planner", "--pipeline", SPEC_PATH, "--profiles", PROFILES_DIR, "--mode", mode],
        "env": [_bootstrap_env()],
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}},
        "volumeMounts": [_spec_mount(), {"name": "profiles", "mountPath": PROFILES_DIR, "readOnly": True}],
    }
    pod = {"containers": [container], "volumes": [
        _spec_volume(pipeline),
        {"name": "profiles", "persistentVolumeClaim": {"claimName": f"slipstream-{pipeline}-profiles",
                                                       "readOnly": True}}]}
    # one decision maker per pipeline: never two during a rollout
    return _deployment(deployment_name(pipeline, "planner"), namespace, labels, labels, 1, pod, None,
                       strategy={"type": "Recreate"})


def tuner_manifests(pipeline: str, *, image: str, namespace: str = "default") -> list[dict[str, Any]]:
    """The tuner service (scaling stage Deployments through the scale subresource) and its RBAC:
    ServiceAccount, Role, RoleBinding, Deployment (see ``deploy/k8s/tuner.yaml``)."""
    name = deployment_name(pipeline, "tuner")

    def meta() -> dict[str, Any]:
        return {"name": name, "namespace": namespace, "labels": {f"{LABEL}/pipeline": pipeline}}

    labels = {f"{LABEL}/pipeline": pipeline, f"{LABEL}/role": "tuner"}
    container = {
        "name": "tuner", "image": image,
        "args": ["tuner", "--pipeline", SPEC_PATH, "--actuator", "k8s", "--namespace", namespace, "--metrics-port", str(TUNER_METRICS_PORT)],
        "env": [_bootstrap_env()],
        "ports": [{"name": "metrics", "containerPort": TUNER_METRICS_PORT}],
        "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
        "volumeMounts": [_spec_mount()],
    }
    pod = {"serviceAccountName": name, "containers": [container], "volumes": [_spec_volume(pipeline)]}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta()},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta(),
         "rules": [{"apiGroups": ["apps"], "resources": ["deployments", "deployments/scale"],
                    "verbs": ["get", "list", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta(),
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}},
        _deployment(name, namespace, labels, labels, 1, pod, TUNER_METRICS_PORT, strategy={"type": "Recreate"}),
    ]


def pipeline_configmap(pipeline: str, spec_text: str, namespace: str = "default") -> dict[str, Any]:
    """The ConfigMap holding the pipeline spec that every Deployment mounts."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"slipstream-{pipeline}-spec", "namespace": namespace,
                         "labels": {f"{LABEL}/pipeline": pipeline}},
            "data": {"pipeline.yaml": spec_text}}


def pipeline_manifests(pipe: Pipeline, spec_text: str, *, image: str, namespace: str = "default",
                       replicas: Mapping[str, int] | None = None, planner_mode: str = "milp") -> list[dict[str, Any]]:
    """Everything a pipeline runs on: spec ConfigMap, every worker (``Pipeline.worker_roles``: the
    stages and, when needed, the join), the planner and the tuner."""
    reps = {s.name: (replicas or {}).get(s.name, s.defaults.replicas) for s in pipe.stages}
    docs = [pipeline_configmap(pipe.name, spec_text, namespace)]
    for role, n in pipe.worker_roles(reps).items():
        gpu = role in reps and pipe.hardware[pipe.stage(role).defaults.hardware].kind == "cuda"
        docs.append(stage_deployment(pipe.name, role, image=image, namespace=namespace, replicas=n,
                                     gpus=1 if gpu else 0))
    docs.append(planner_deployment(pipe.name, image=image, mode=planner_mode, namespace=namespace))
    return docs + tuner_manifests(pipe.name, image=image, namespace=namespace)


class KubernetesActuator:
    """Scales ``deployment_name(pipeline, stage)`` in ``namespace`` through the scale subresource."""

    def __init__(self, pipeline: str, namespace: str = "default", *, in_cluster: bool | None = None) -> None:
        try:
            from kubernetes import client, config  # optional dependency
        except ImportError as exc:
            raise RuntimeError(
                "KubernetesActuator needs the kubernetes client: pip install 'slipstream[k8s]' "
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
        self.pipeline = pipeline
        self.namespace = namespace
        self._apps = client.AppsV1Api()

    def set_replicas(self, stage: str, n: int) -> None:
        self._apps.patch_namespaced_deployment_scale(
            deployment_name(self.pipeline, stage), self.namespace, scale_patch(n))

    def replicas(self, stage: str) -> int:
        scale = self._apps.read_namespaced_deployment_scale(deployment_name(self.pipeline, stage),
                                                            self.namespace)
        return int(scale.spec.replicas or 0)
