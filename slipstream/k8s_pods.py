"""The parts every Kubernetes pod of a pipeline shares (``slipstream.k8s_manifests`` and
``slipstream.k8s_gateway`` build their objects from them): labels, the broker address and spec
ConfigMaps as environment and volumes, the non-root security contexts, probes and scrape annotations
on the metrics port, the topic-creating init container, and a Deployment around given containers."""
from __future__ import annotations

import json
from typing import Any

from slipstream.streams.config import BOOTSTRAP_ENV

LABEL = "slipstream.io"
METRICS_PORT = 9100
METRICS_ADDR = f"0.0.0.0:{METRICS_PORT}"
SPEC_DIR = "/etc/slipstream"
SPEC_PATH = f"{SPEC_DIR}/pipeline.yaml"
HOME = "/home/slipstream"  # the image's user (deploy/docker/Dockerfile)
RUN_AS = 10001
SMALL = {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}


def spec_configmap_name(pipeline: str) -> str:
    return f"slipstream-{pipeline}-spec"


def kafka_configmap_name(pipeline: str) -> str:
    return f"slipstream-{pipeline}-kafka"


def object_meta(name: str, pipeline: str, namespace: str, **labels: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": {f"{LABEL}/pipeline": pipeline, **labels}}


def pod_env(pipeline: str) -> list[dict[str, Any]]:
    return [{"name": BOOTSTRAP_ENV,
             "valueFrom": {"configMapKeyRef": {"name": kafka_configmap_name(pipeline), "key": "bootstrap"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "MPLCONFIGDIR", "value": "/tmp/matplotlib"}]


def spec_mounts() -> list[dict[str, Any]]:
    return [{"name": "pipeline", "mountPath": SPEC_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "cache", "mountPath": f"{HOME}/.cache"}]


def pod_volumes(pipeline: str) -> list[dict[str, Any]]:
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


def container(name: str, image: str, pipeline: str, args: list[str], resources: dict[str, Any],
               mounts: list[dict[str, Any]] = ()) -> dict[str, Any]:
    return {"name": name, "image": image, "args": [*args, "--metrics-addr", METRICS_ADDR],
            "env": pod_env(pipeline), "ports": [{"name": "metrics", "containerPort": METRICS_PORT}],
            "resources": resources, **PROBES, "securityContext": dict(CONTAINER_SECURITY),
            "volumeMounts": [*spec_mounts(), *mounts]}


def topics_init(pipeline: str, image: str) -> dict[str, Any]:
    """Creates the pipeline's missing topics before the process starts (idempotent, any pod may run it)."""
    return {"name": "topics", "image": image, "args": ["topics", "--pipeline", SPEC_PATH],
            "env": pod_env(pipeline), "resources": SMALL, "securityContext": dict(CONTAINER_SECURITY),
            "volumeMounts": spec_mounts()}


def deployment(name: str, pipeline: str, namespace: str, role_labels: dict[str, str], replicas: int | None,
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
        "volumes": [*pod_volumes(pipeline), *volumes],
        **(node or {}),
    }
    if service_account:
        pod["serviceAccountName"] = service_account
    if topics_image:
        pod["initContainers"] = [topics_init(pipeline, topics_image)]
    spec: dict[str, Any] = {"selector": {"matchLabels": selector}}
    if replicas is not None:  # None: another owner sets it (the tuner, for the stages)
        spec = {"replicas": int(replicas), **spec}
    if single:  # one decision maker per pipeline: never two during a rollout
        spec["strategy"] = {"type": "Recreate"}
    spec["template"] = {"metadata": {"labels": labels, "annotations": dict(SCRAPE)}, "spec": pod}
    return plain({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": object_meta(name, pipeline, namespace, **role_labels, **extra), "spec": spec})


def plain(obj: Any) -> Any:
    """A copy sharing nothing with the constants (YAML would write shared parts as anchors)."""
    return json.loads(json.dumps(obj))
