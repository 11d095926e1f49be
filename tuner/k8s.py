"""Kubernetes: one Deployment per stage (manifest generation) and an actuator that scales it.

The manifests are plain dicts (``yaml.safe_dump`` them; ``slipstream tuner manifests`` does); the
template they follow is ``deploy/k8s/stage-deployment.yaml``. Each stage Deployment runs
``slipstream worker --pipeline /etc/slipstream/pipeline.yaml --stage NAME`` with the pipeline spec
mounted from a ConfigMap, the broker address in ``SLIPSTREAM_BOOTSTRAP`` (from the ``slipstream-kafka``
ConfigMap) and Prometheus scrape annotations on the pod.

:class:`KubernetesActuator` patches the Deployment's ``scale`` subresource. The ``kubernetes`` client
(``pip install slipstream[k8s]``, kubernetes==37.0.2) is imported only when the actuator is built.
"""
from __future__ import annotations

from typing import Any

LABEL = "slipstream.io"
METRICS_PORT = 9100


def deployment_name(pipeline: str, stage: str) -> str:
    return f"slipstream-{pipeline}-{stage}"[:63].rstrip("-")


def scale_patch(replicas: int) -> dict[str, Any]:
    """The body of a PATCH to a Deployment's scale subresource."""
    if replicas < 0:
        raise ValueError(f"replicas must be >= 0, got {replicas}")
    return {"spec": {"replicas": int(replicas)}}


def stage_deployment(pipeline: str, stage: str, *, image: str, replicas: int, namespace: str = "default",
                     cpu: str = "1", memory: str = "2Gi", gpus: int = 0,
                     metrics_port: int = METRICS_PORT) -> dict[str, Any]:
    """A stage's Deployment manifest (see ``deploy/k8s/stage-deployment.yaml``)."""
    name = deployment_name(pipeline, stage)
    labels = {f"{LABEL}/pipeline": pipeline, f"{LABEL}/stage": stage, "app.kubernetes.io/name": name}
    limits: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if gpus:
        limits["nvidia.com/gpu"] = gpus
    container = {
        "name": "worker",
        "image": image,
        "args": ["worker", "--pipeline", "/etc/slipstream/pipeline.yaml", "--stage", stage],
        "env": [
            {"name": "SLIPSTREAM_BOOTSTRAP",
             "valueFrom": {"configMapKeyRef": {"name": "slipstream-kafka", "key": "bootstrap"}}},
            {"name": "SLIPSTREAM_METRICS_PORT", "value": str(metrics_port)},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        "ports": [{"name": "metrics", "containerPort": metrics_port}],
        "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": limits},
        "volumeMounts": [{"name": "pipeline", "mountPath": "/etc/slipstream", "readOnly": True}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": int(replicas),
            "selector": {"matchLabels": {f"{LABEL}/pipeline": pipeline, f"{LABEL}/stage": stage}},
            # scale-down removes pods; a long grace lets a worker finish its batch and commit
            "template": {
                "metadata": {"labels": labels, "annotations": {
                    "prometheus.io/scrape": "true", "prometheus.io/port": str(metrics_port),
                    "prometheus.io/path": "/metrics"}},
                "spec": {
                    "terminationGracePeriodSeconds": 30,
                    "containers": [container],
                    "volumes": [{"name": "pipeline",
                                 "configMap": {"name": f"slipstream-{pipeline}-spec"}}],
                },
            },
        },
    }


def pipeline_configmap(pipeline: str, spec_text: str, namespace: str = "default") -> dict[str, Any]:
    """The ConfigMap holding the pipeline spec that every stage Deployment mounts."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"slipstream-{pipeline}-spec", "namespace": namespace,
                         "labels": {f"{LABEL}/pipeline": pipeline}},
            "data": {"pipeline.yaml": spec_text}}


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
