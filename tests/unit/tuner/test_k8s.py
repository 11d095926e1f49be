"""Kubernetes objects of `slipstream k8s-manifests` (tuner/k8s.py): what each holds, and the actuator."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import click
import pytest
from click.testing import CliRunner

from slipstream.cli import main as cli
from slipstream.commands.planner_service import pin_hardware
from slipstream.commands.tuner import k8s_manifests_cmd
from tests.k8s_inputs import SPEC, by_name, inputs, plan_file, pod, render
from tuner.k8s import (GPU_RESOURCE, PROFILES_DIR, RUN_AS, SCALE_RULE, SPEC_PATH, KubernetesActuator,
                       deployment_name, scale_patch)


def test_every_process_of_a_fanout_pipeline_join_included(tmp_path):
    docs = render(tmp_path, "--replicas", "classify=5", "--namespace", "ml")
    deps = by_name(docs)
    assert sorted(deps) == ["slipstream-shop-classify", "slipstream-shop-detect", "slipstream-shop-gateway",
                            "slipstream-shop-join", "slipstream-shop-planner", "slipstream-shop-tuner"]
    assert sorted(d["kind"] for d in docs if d["kind"] != "Deployment") == [
        "ConfigMap", "ConfigMap", "ConfigMap", "HorizontalPodAutoscaler", "Role", "RoleBinding", "Service",
        "ServiceAccount"]
    assert all(d["metadata"]["namespace"] == "ml" for d in docs)
    assert [deps[f"slipstream-shop-{r}"]["spec"]["replicas"] for r in ("detect", "classify", "join")] == [2, 5, 1]
    assert pod(deps["slipstream-shop-join"])["containers"][0]["args"][:6] == [
        "worker", "--pipeline", SPEC_PATH, "--stage", "join", "--metrics-addr"]


def test_a_chain_has_no_join(tmp_path):
    names = by_name(render(tmp_path, spec=SPEC.replace("fanout: 3.0", "fanout: 1.0")))
    assert "slipstream-shop-join" not in names and len(names) == 5


def test_pods_are_sized_by_their_hardware_threads_memory_and_gpu(tmp_path):
    deps = by_name(render(tmp_path))
    det, cls = pod(deps["slipstream-shop-detect"]), pod(deps["slipstream-shop-classify"])
    # cpu-4: four CPUs (the hardware's threads, not always 1), 6 GiB; Guaranteed: requests == limits
    res = cls["containers"][0]["resources"]
    assert res["requests"] == res["limits"] == {"cpu": "4", "memory": "6Gi"}
    assert "nodeSelector" not in cls and cls["containers"][0]["image"] == "reg/slipstream:1"
    # gpu-1: a GPU, its threads and memory, on a GPU node, the CUDA image
    res = det["containers"][0]["resources"]
    assert res["limits"] == res["requests"] == {"cpu": "2", "memory": "16Gi", GPU_RESOURCE: 1}
    assert det["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert det["tolerations"] == [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    assert det["containers"][0]["image"] == "reg/slipstream:1-cuda"
    assert deps["slipstream-shop-detect"]["metadata"]["labels"]["slipstream.io/hardware"] == "gpu-1"


def test_the_plan_places_stages_and_pins_the_live_planner(tmp_path):
    plan = plan_file(tmp_path, {"detect": ("cpu-4", 3), "classify": ("cpu-1", 2)})
    deps = by_name(render(tmp_path, "--plan", str(plan)))
    det = pod(deps["slipstream-shop-detect"])
    assert det["containers"][0]["resources"]["limits"] == {"cpu": "4", "memory": "6Gi"}
    assert "nodeSelector" not in det and deps["slipstream-shop-detect"]["spec"]["replicas"] == 3
    assert pod(deps["slipstream-shop-classify"])["containers"][0]["resources"]["limits"]["cpu"] == "1"
    # the selector never holds the hardware: a re-render with another plan must apply over the old one
    assert "slipstream.io/hardware" not in deps["slipstream-shop-detect"]["spec"]["selector"]["matchLabels"]
    args = pod(deps["slipstream-shop-planner"])["containers"][0]["args"]
    pins = [args[i + 1] for i, a in enumerate(args) if a == "--hardware"]
    assert pins == ["detect=cpu-4", "classify=cpu-1"]


def test_a_plan_for_another_pipeline_is_refused(tmp_path):
    path, prof = inputs(tmp_path)
    plan = plan_file(tmp_path, {"detect": ("cpu-4", 3)})
    r = CliRunner().invoke(k8s_manifests_cmd, ["--pipeline", str(path), "--image", "i", "--profiles", str(prof),
                                               "--plan", str(plan)])
    assert r.exit_code == 2 and "classify" in r.output
    plan = plan_file(tmp_path, {"detect": ("tpu", 1), "classify": ("cpu-1", 1)})
    r = CliRunner().invoke(k8s_manifests_cmd, ["--pipeline", str(path), "--image", "i", "--profiles", str(prof),
                                               "--plan", str(plan)])
    assert r.exit_code == 1 and "tpu" in r.output


def test_pin_hardware_keeps_only_the_pinned_profiles():
    from planner.problem import HardwareOption, Problem, StageOption, VariantOption

    curve = object()
    problem = Problem(slo_ms=100, rate_qps=1, hardware={"a": HardwareOption("a", 1.0), "b": HardwareOption("b", 2.0)},
                      stages=(StageOption("s", (VariantOption("x", 0.9, {"a": curve, "b": curve}),
                                                VariantOption("y", 0.8, {"b": curve}))),))
    pinned = pin_hardware(problem, {"s": "a"})
    assert [(v.name, sorted(v.latency)) for v in pinned.stages[0].variants] == [("x", ["a"])]
    with pytest.raises(click.BadParameter, match="no variant"):
        pin_hardware(problem, {"s": "c"})


def test_every_referenced_configmap_is_generated(tmp_path):
    docs = render(tmp_path)
    written = {d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"}
    referenced = set()
    for d in by_name(docs).values():
        p = pod(d)
        referenced |= {v["configMap"]["name"] for v in p["volumes"] if "configMap" in v}
        referenced |= {e["valueFrom"]["configMapKeyRef"]["name"] for c in p["containers"] + p.get("initContainers", [])
                       for e in c["env"] if "configMapKeyRef" in e.get("valueFrom", {})}
    assert referenced == written == {"slipstream-shop-spec", "slipstream-shop-kafka", "slipstream-shop-profiles"}
    cms = by_name(docs, "ConfigMap")
    assert cms["slipstream-shop-spec"]["data"]["pipeline.yaml"] == SPEC
    assert cms["slipstream-shop-kafka"]["data"]["bootstrap"] == "kafka.kafka.svc.cluster.local:9092"
    # '@' is no ConfigMap key: the planner's volume maps each key back to the store's file name
    assert sorted(cms["slipstream-shop-profiles"]["data"]) == ["v.at.cpu-4.json", "v.at.gpu-1.json",
                                                              "w.at.cpu-1.json", "w.at.cpu-4.json"]
    vol = next(v for v in pod(by_name(docs)["slipstream-shop-planner"])["volumes"] if v["name"] == "profiles")
    assert {i["key"]: i["path"] for i in vol["configMap"]["items"]}["v.at.gpu-1.json"] == "v@gpu-1.json"


def test_every_pod_is_restricted_probed_and_scraped(tmp_path):
    for d in by_name(render(tmp_path)).values():
        if d["metadata"]["name"].endswith("-gateway"):
            continue  # one port for everything: test_the_gateway_is_served_probed_and_scaled
        p = pod(d)
        assert p["securityContext"] == {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS,
                                        "fsGroup": RUN_AS, "seccompProfile": {"type": "RuntimeDefault"}}
        assert d["spec"]["template"]["metadata"]["annotations"] == {
            "prometheus.io/scrape": "true", "prometheus.io/port": "9100", "prometheus.io/path": "/metrics"}
        assert p["automountServiceAccountToken"] is d["metadata"]["name"].endswith("-tuner")
        writable = {v["name"] for v in p["volumes"] if "emptyDir" in v}
        for c in p["containers"] + p.get("initContainers", []):
            assert c["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                            "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]},
                                            "seccompProfile": {"type": "RuntimeDefault"}}
            mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
            assert mounts["/tmp"] in writable and mounts["/home/slipstream/.cache"] in writable
        c = p["containers"][0]
        assert c["ports"] == [{"name": "metrics", "containerPort": 9100}]
        assert c["args"][-2:] == ["--metrics-addr", "0.0.0.0:9100"]
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
        assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}


def test_generated_arguments_are_accepted_by_the_real_commands(tmp_path):
    """Each container's args parse with slipstream's own CLI (paths swapped for real ones)."""
    spec_file, prof = inputs(tmp_path)
    for d in render(tmp_path):
        if d["kind"] != "Deployment":
            continue
        for c in pod(d)["containers"] + pod(d).get("initContainers", []):
            args = [str(spec_file) if a == SPEC_PATH else str(prof) if a == PROFILES_DIR else a for a in c["args"]]
            ctx = cli.make_context("slipstream", list(args), resilient_parsing=False)
            sub = cli.get_command(ctx, args[0])
            assert sub is not None, args
            sub.make_context(args[0], args[1:], parent=ctx)  # raises on an unknown option or a bad value


def test_tuner_may_only_scale_this_pipelines_workers(tmp_path):
    docs = render(tmp_path)
    role = by_name(docs, "Role")["slipstream-shop-tuner"]
    assert role["rules"] == [{"apiGroups": ["apps"], "resources": ["deployments/scale"],
                              "verbs": ["get", "patch", "update"],
                              "resourceNames": ["slipstream-shop-classify", "slipstream-shop-detect"]}]
    binding = by_name(docs, "RoleBinding")["slipstream-shop-tuner"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "slipstream-shop-tuner", "namespace": "default"}]
    tuner = by_name(docs)["slipstream-shop-tuner"]
    assert pod(tuner)["serviceAccountName"] == "slipstream-shop-tuner"
    args = pod(tuner)["containers"][0]["args"]
    assert "--plan" not in args and args[args.index("--namespace") + 1] == "$(POD_NAMESPACE)"


def test_strimzi_topics_replace_the_topic_init_containers(tmp_path):
    plain = render(tmp_path)
    assert all(pod(d)["initContainers"][0]["args"][0] == "topics"
               for n, d in by_name(plain).items() if not n.endswith("-tuner"))
    docs = render(tmp_path, "--strimzi", "events", "--topic-replicas", "3")
    assert all("initContainers" not in pod(d) for d in by_name(docs).values())
    assert by_name(docs, "ConfigMap")["slipstream-shop-kafka"]["data"]["bootstrap"] == "events-kafka-bootstrap:9092"
    topics = {d["spec"]["topicName"]: d for d in docs if d["kind"] == "KafkaTopic"}
    from streams.spec import parse_pipeline
    from streams.topics import all_topics
    import yaml
    expected = all_topics(parse_pipeline(yaml.safe_load(SPEC)))
    assert sorted(topics) == sorted(t.name for t in expected)
    for t in expected:
        k = topics[t.name]
        assert k["apiVersion"] == "kafka.strimzi.io/v1" and k["metadata"]["labels"]["strimzi.io/cluster"] == "events"
        assert (k["spec"]["partitions"], k["spec"]["replicas"], k["spec"].get("config", {})) == (
            t.partitions, 3, dict(t.config))


# ------------------------------------------------------------------------------- the actuator


class _ApiServer(BaseHTTPRequestHandler):
    """Answers the scale subresource of any Deployment like the API server; records every request."""

    requests: list = []
    replicas = 2

    def _scale(self) -> None:
        body = json.dumps({"apiVersion": "autoscaling/v1", "kind": "Scale",
                           "metadata": {"name": self.path.split("/")[-2]},
                           "spec": {"replicas": type(self).replicas}}).encode()
        self.send_response(200 if self.path.endswith("/scale") else 403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).requests.append(("GET", self.path, None, None))
        self._scale()

    def do_PATCH(self) -> None:  # noqa: N802
        n = int(self.headers["Content-Length"])
        type(self).requests.append(("PATCH", self.path, self.headers["Content-Type"], json.loads(self.rfile.read(n))))
        self._scale()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def api_server():
    _ApiServer.requests = []
    server = HTTPServer(("127.0.0.1", 0), _ApiServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_actuator_reads_and_patches_only_the_scale_subresource(api_server):
    """The real kubernetes client against a local HTTP server: every call is a Role-allowed verb on
    deployments/scale (PATCH = patch, GET = get)."""
    from kubernetes import client

    conf = client.Configuration(host=api_server)
    act = KubernetesActuator("shop", "ml", apps=client.AppsV1Api(client.ApiClient(conf)))
    act.set_replicas("detect", 3)
    assert act.replicas("classify") == 2
    path = "/apis/apps/v1/namespaces/ml/deployments/{}/scale"
    assert [(m, p, b) for m, p, _, b in _ApiServer.requests] == [
        ("PATCH", path.format("slipstream-shop-detect"), {"spec": {"replicas": 3}}),
        ("GET", path.format("slipstream-shop-classify"), None)]
    verbs = {"PATCH": "patch", "GET": "get", "PUT": "update"}
    assert {verbs[m] for m, *_ in _ApiServer.requests} <= set(SCALE_RULE["verbs"])
    assert SCALE_RULE["resources"] == ["deployments/scale"]


def test_actuator_explains_a_missing_client(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "kubernetes", None)  # import kubernetes -> ImportError
    with pytest.raises(RuntimeError, match=r"slipstream\[k8s\]"):
        KubernetesActuator("p")


def test_scale_patch_and_names():
    assert scale_patch(5) == {"spec": {"replicas": 5}}
    with pytest.raises(ValueError):
        scale_patch(-1)
    assert len(deployment_name("x" * 40, "y" * 40)) <= 63


def test_the_gateway_is_served_probed_and_scaled(tmp_path):
    docs = render(tmp_path, "--namespace", "ml")
    gw = {d["kind"]: d for d in docs if d["metadata"]["name"] == "slipstream-shop-gateway"}
    assert sorted(gw) == ["Deployment", "HorizontalPodAutoscaler", "Service"]
    p = pod(gw["Deployment"])
    c = p["containers"][0]
    assert c["args"] == ["gateway", "--pipeline", SPEC_PATH, "--addr", "0.0.0.0:8080"]
    assert c["ports"] == [{"name": "http", "containerPort": 8080}]
    assert c["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    assert gw["Deployment"]["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == "8080"
    assert p["initContainers"][0]["args"][:1] == ["topics"] and gw["Deployment"]["spec"]["replicas"] == 2
    sel = gw["Service"]["spec"]["selector"]
    assert all(gw["Deployment"]["spec"]["template"]["metadata"]["labels"][k] == v for k, v in sel.items())
    assert gw["Service"]["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http"}]
    assert gw["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]["name"] == "slipstream-shop-gateway"
    assert gw["HorizontalPodAutoscaler"]["spec"]["minReplicas"] == 2
