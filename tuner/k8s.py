"""The tuner's Kubernetes actuator: a stage's replicas as pods of its worker Deployment.

A pod is one worker process holding up to ``k`` replicas (``--max-replicas k`` in its args, its CPU
and memory limits ``k`` times the hardware's; ``slipstream.k8s_manifests`` writes both). A stage's
replica count means the same number of replicas here as with the local actuator: ``n`` replicas run in
``slipstream.streams.placement.layout(n, k).workers`` pods, and each pod's worker loads
``layout(n, k).per_worker`` of them, reading ``n`` from the StageConfig on the control topic. With
``standby`` warm pods per stage (as ``slipstream up`` keeps warm worker processes) a stage at ``n > 0``
runs ``layout(n, k, standby).processes`` pods: members of its group that hold the model, so a killed
pod's partitions move to a loaded worker after the group's session timeout, not after a new pod's start
(tens of seconds on a small node, docs/kubernetes.md).

The tuner alone owns ``spec.replicas`` of the worker Deployments: the generated manifests leave it
out, and the actuator sets it with a server-side apply of the ``scale`` subresource under its own field
manager (``FIELD_MANAGER``), so re-applying the manifests (``kubectl apply``, Argo CD, Flux) never
resets it and nobody else's apply may own it silently. The tuner's Role allows exactly these calls
(``SCALE_RULE``). The ``kubernetes`` client (``pip install slipstream[k8s]``) is imported only when the
actuator is built.
"""
from __future__ import annotations

from typing import Any, Mapping

from ..streams.placement import layout

FIELD_MANAGER = "slipstream-tuner"
# The tuner's Role: exactly what KubernetesActuator calls (read and apply the scale subresource).
SCALE_RULE = {"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["get", "patch"]}
APPLY = "application/apply-patch+yaml"


def deployment_name(pipeline: str, role: str) -> str:
    """A stage's, the join's, the planner's or the tuner's Deployment."""
    return f"slipstream-{pipeline}-{role}"[:63].rstrip("-")


def pods_for(replicas: int, per_pod: int, standby: int = 0) -> int:
    """Pods (worker processes) that hold ``replicas``, ``per_pod`` at most each,
    and ``standby`` warm ones more (none for a stage at 0 replicas)."""
    if replicas < 0:
        raise ValueError(f"replicas must be >= 0, got {replicas}")
    return 0 if replicas == 0 else layout(replicas, per_pod, standby).processes


def scale_apply(name: str, namespace: str, pods: int) -> dict[str, Any]:
    """The body of a server-side apply to a Deployment's scale subresource: ``spec.replicas`` only."""
    if pods < 0:
        raise ValueError(f"pods must be >= 0, got {pods}")
    return {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": int(pods)}}


API_TIMEOUT_S = 10.0  # per Kubernetes API call (connect, then read): an API server that hangs fails the call


class KubernetesActuator:
    """Scales ``deployment_name(pipeline, stage)`` in ``namespace`` to the pods that hold the asked
    replicas (``per_pod``: each stage's replicas per pod, the manifests' ``--max-replicas``;
    default 1), by a server-side apply of ``deployments/scale``, the only thing the tuner's Role
    (``SCALE_RULE``) allows. ``apps`` is a ``kubernetes.client.AppsV1Api`` (default: one configured
    in-cluster, else from kubeconfig). Every call is bounded by ``timeout_s`` (the client's
    ``_request_timeout``; it raises past it). ``standby``: warm pods more per stage at one replica or more."""

    def __init__(self, pipeline: str, namespace: str = "default", *, per_pod: Mapping[str, int] | None = None,
                 standby: int = 0, in_cluster: bool | None = None, apps: Any = None,
                 timeout_s: float = API_TIMEOUT_S) -> None:
        self.pipeline = pipeline
        self.namespace = namespace
        self.per_pod = dict(per_pod or {})
        if any(k < 1 for k in self.per_pod.values()):
            raise ValueError(f"replicas per pod must be >= 1, got {self.per_pod}")
        if standby < 0:
            raise ValueError(f"standby pods must be >= 0, got {standby}")
        self.standby = standby
        self._asked: dict[str, int] = {}
        self._apps = apps if apps is not None else _apps_api(in_cluster)
        self._timeout = (timeout_s, timeout_s)

    def set_replicas(self, stage: str, n: int) -> None:
        name = deployment_name(self.pipeline, stage)
        body = scale_apply(name, self.namespace, pods_for(n, self.per_pod.get(stage, 1), self.standby))
        self._apps.patch_namespaced_deployment_scale(name, self.namespace, body, field_manager=FIELD_MANAGER,
                                                     force=True, _content_type=APPLY,
                                                     _request_timeout=self._timeout)
        self._asked[stage] = n

    def replicas(self, stage: str) -> int:
        """Replicas the stage's pods hold: its pods less the standby ones times replicas per pod, at
        most what was asked."""
        scale = self._apps.read_namespaced_deployment_scale(deployment_name(self.pipeline, stage), self.namespace,
                                                            _request_timeout=self._timeout)
        held = max(0, int(scale.spec.replicas or 0) - self.standby) * self.per_pod.get(stage, 1)
        return min(held, self._asked[stage]) if stage in self._asked else held


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
