"""Kubernetes objects of a pipeline's gateway (``slipstream gateway``, docs/gateway.md), added to
``slipstream.k8s_manifests.pipeline_manifests``: a Deployment (two replicas at least: a gateway that
dies loses only its own callers' answers), a Service in front of them, and a HorizontalPodAutoscaler on
CPU. The HPA is the one owner of the gateway's replica count: the Deployment carries no
``spec.replicas``, so applying the manifests again never resets it.

The gateway serves the Open Inference Protocol, its health endpoints and ``/metrics`` on one port
(``http``, 8080): the probes read ``/v2/health/live`` and ``/v2/health/ready`` (producer and results
reader up and assigned), and Prometheus scrapes that port; the gRPC service listens on ``grpc``
(8081), behind the Service's port of the same name.
"""
from __future__ import annotations

from typing import Any

from slipstream.streams.spec import Pipeline
from slipstream.k8s_pods import CONTAINER_SECURITY, LABEL, SPEC_PATH, deployment, object_meta, plain, pod_env, spec_mounts
from slipstream.tuner.k8s import deployment_name

GATEWAY_PORT = 8080
GRPC_PORT = 8081  # the protocol's GRPCInferenceService (slipstream gateway --grpc-port)
RESOURCES = {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}}
PROBES = {
    "startupProbe": {"httpGet": {"path": "/v2/health/live", "port": "http"}, "periodSeconds": 2, "failureThreshold": 60},
    "livenessProbe": {"httpGet": {"path": "/v2/health/live", "port": "http"}, "periodSeconds": 10, "failureThreshold": 3},
    "readinessProbe": {"httpGet": {"path": "/v2/health/ready", "port": "http"}, "periodSeconds": 5, "failureThreshold": 2},
}


def gateway_manifests(pipe: Pipeline, *, image: str, namespace: str = "default", replicas: int = 2,
                      max_replicas: int = 10, cpu_target_pct: int = 70, create_topics: bool = True) -> list[dict[str, Any]]:
    """The gateway's Deployment, Service (port 80 -> ``http``) and HorizontalPodAutoscaler."""
    name = deployment_name(pipe.name, "gateway")
    role = {f"{LABEL}/role": "gateway"}
    c = {"name": "gateway", "image": image,
         "args": ["gateway", "--pipeline", SPEC_PATH, "--addr", f"0.0.0.0:{GATEWAY_PORT}",
                  "--grpc-port", str(GRPC_PORT)],
         "env": pod_env(pipe.name), "ports": [{"name": "http", "containerPort": GATEWAY_PORT},
                                             {"name": "grpc", "containerPort": GRPC_PORT}], "resources": RESOURCES,
         **PROBES, "securityContext": dict(CONTAINER_SECURITY), "volumeMounts": spec_mounts()}
    dep = deployment(name, pipe.name, namespace, role, None, [c], topics_image=image if create_topics else None)
    dep["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] = str(GATEWAY_PORT)
    service = {"apiVersion": "v1", "kind": "Service", "metadata": object_meta(name, pipe.name, namespace, **role),
               "spec": {"selector": {f"{LABEL}/pipeline": pipe.name, **role},
                        "ports": [{"name": "http", "port": 80, "targetPort": "http"},
                                  {"name": "grpc", "port": GRPC_PORT, "targetPort": "grpc"}]}}
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
           "metadata": object_meta(name, pipe.name, namespace, **role),
           "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                    "minReplicas": replicas, "maxReplicas": max(max_replicas, replicas),
                    "metrics": [{"type": "Resource", "resource": {
                        "name": "cpu", "target": {"type": "Utilization", "averageUtilization": cpu_target_pct}}}]}}
    return [dep, *plain([service, hpa])]
