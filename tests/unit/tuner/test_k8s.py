"""Kubernetes objects of `slipstream k8s-manifests` (slipstream/k8s_manifests.py): what each holds, and the
tuner's actuator (tuner/k8s.py)."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import click
import pytest
from click.testing import CliRunner

from slipstream.cli import main as cli
from slipstream.commands.planner_service import pin_hardware
from slipstream.commands.k8s_manifests import k8s_manifests_cmd
from tests.k8s_inputs import SPEC, by_name, inputs, plan_file, pod, render
from slipstream.k8s_manifests import GPU_RESOURCE, PROFILES_DIR
from slipstream.k8s_pods import RUN_AS, SPEC_PATH
from slipstream.tuner.k8s import FIELD_MANAGER, SCALE_RULE, KubernetesActuator, deployment_name, pods_for, scale_apply


def test_every_process_of_a_fanout_pipeline_join_included(tmp_path):
    docs = render(tmp_path, "--replicas", "classify=5", "--namespace", "ml")
    deps = by_name(docs)
    assert sorted(deps) == ["slipstream-shop-classify", "slipstream-shop-detect", "slipstream-shop-gateway",
                            "slipstream-shop-join", "slipstream-shop-planner", "slipstream-shop-tuner"]
    assert sorted(d["kind"] for d in docs if d["kind"] != "Deployment") == [
        "ConfigMap", "ConfigMap", "ConfigMap", "HorizontalPodAutoscaler", "Role", "RoleBinding", "Service",
        "ServiceAccount"]
    assert all(d["metadata"]["namespace"] == "ml" for d in docs)
    # the stages' replica counts are the tuner's (no spec.replicas to reset it); the join runs one pod
    assert ["replicas" in deps[f"slipstream-shop-{r}"]["spec"] for r in ("detect", "classify")] == [False, False]
    assert deps["slipstream-shop-join"]["spec"]["replicas"] == 1
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
    assert "nodeSelector" not in det and "replicas" not in deps["slipstream-shop-detect"]["spec"]
    # classify: planned at 2 on cpu-1, so one pod of 2 replicas and 2 CPUs (docs/kubernetes.md)
    assert pod(deps["slipstream-shop-classify"])["containers"][0]["resources"]["limits"]["cpu"] == "2"
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
    from slipstream.planner.problem import HardwareOption, Problem, StageOption, VariantOption

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
                              "verbs": ["get", "patch"],
                              "resourceNames": ["slipstream-shop-classify", "slipstream-shop-detect"]}]
    binding = by_name(docs, "RoleBinding")["slipstream-shop-tuner"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "slipstream-shop-tuner", "namespace": "default"}]
    tuner = by_name(docs)["slipstream-shop-tuner"]
    assert pod(tuner)["serviceAccountName"] == "slipstream-shop-tuner"
    args = pod(tuner)["containers"][0]["args"]
    assert "--plan" not in args and args[args.index("--namespace") + 1] == "$(POD_NAMESPACE)"


def test_the_planner_and_tuner_run_the_control_image(tmp_path):
    deps = by_name(render(tmp_path, "--control-image", "reg/slipstream:1-control"))
    images = {n.split("-")[-1]: pod(d)["containers"][0]["image"] for n, d in deps.items()}
    assert images == {"detect": "reg/slipstream:1-cuda", "classify": "reg/slipstream:1", "join": "reg/slipstream:1",
                      "planner": "reg/slipstream:1-control", "tuner": "reg/slipstream:1-control",
                      "gateway": "reg/slipstream:1"}


def test_strimzi_topics_replace_the_topic_init_containers(tmp_path):
    plain = render(tmp_path)
    assert all(pod(d)["initContainers"][0]["args"][0] == "topics"
               for n, d in by_name(plain).items() if not n.endswith("-tuner"))
    docs = render(tmp_path, "--strimzi", "events", "--topic-replicas", "3")
    assert all("initContainers" not in pod(d) for d in by_name(docs).values())
    assert by_name(docs, "ConfigMap")["slipstream-shop-kafka"]["data"]["bootstrap"] == "events-kafka-bootstrap:9092"
    topics = {d["spec"]["topicName"]: d for d in docs if d["kind"] == "KafkaTopic"}
    from slipstream.streams.spec import parse_pipeline
    from slipstream.streams.topics import all_topics
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
        path = self.path.split("?")[0]
        body = json.dumps({"apiVersion": "autoscaling/v1", "kind": "Scale",
                           "metadata": {"name": path.split("/")[-2]},
                           "spec": {"replicas": type(self).replicas}}).encode()
        self.send_response(200 if path.endswith("/scale") else 403)
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
    _ApiServer.requests, _ApiServer.replicas = [], 2
    server = HTTPServer(("127.0.0.1", 0), _ApiServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _actuator(api_server, **kw):
    from kubernetes import client

    return KubernetesActuator("shop", "ml", apps=client.AppsV1Api(client.ApiClient(client.Configuration(host=api_server))),
                              **kw)


def test_actuator_applies_only_the_scale_subresource_under_its_own_field_manager(api_server):
    """The real kubernetes client against a local HTTP server: every call is a Role-allowed verb on
    deployments/scale, and the write is a server-side apply owned by the tuner's field manager
    (forced: the tuner is the one owner of spec.replicas), holding spec.replicas and nothing else."""
    act = _actuator(api_server, per_pod={"detect": 2})
    act.set_replicas("detect", 3)  # 3 replicas, 2 per pod: 2 pods
    assert act.replicas("classify") == 2
    path = "/apis/apps/v1/namespaces/ml/deployments/{}/scale"
    (m, p, ctype, body), get = _ApiServer.requests
    assert (m, p.split("?")[0], ctype) == ("PATCH", path.format("slipstream-shop-detect"),
                                           "application/apply-patch+yaml")
    assert sorted(p.split("?")[1].split("&")) == ["fieldManager=" + FIELD_MANAGER, "force=true"]
    assert body == {"apiVersion": "autoscaling/v1", "kind": "Scale",
                    "metadata": {"name": "slipstream-shop-detect", "namespace": "ml"}, "spec": {"replicas": 2}}
    assert get[:2] == ("GET", path.format("slipstream-shop-classify"))
    verbs = {"PATCH": "patch", "GET": "get"}
    assert {verbs[m] for m, *_ in _ApiServer.requests} == set(SCALE_RULE["verbs"])
    assert SCALE_RULE["resources"] == ["deployments/scale"]


def test_the_applied_manifests_leave_the_tuners_replicas_alone(tmp_path, api_server):
    """One owner of a stage's replica count: what users apply has no spec.replicas (so kubectl apply,
    Argo CD or Flux neither set nor reset it), and the only writer is the tuner's scale apply."""
    stage_deps = [d for n, d in by_name(render(tmp_path)).items() if n.split("-")[-1] in ("detect", "classify")]
    assert len(stage_deps) == 2 and all("replicas" not in d["spec"] for d in stage_deps)
    act = _actuator(api_server)
    act.set_replicas("classify", 4)
    writes = [(p.split("?")[0], b) for m, p, _, b in _ApiServer.requests if m != "GET"]
    assert writes == [("/apis/apps/v1/namespaces/ml/deployments/slipstream-shop-classify/scale",
                       scale_apply("slipstream-shop-classify", "ml", 4))]


@pytest.mark.parametrize("node_cores", [4, 16, 64, 128])  # a node that can schedule the pod
@pytest.mark.parametrize("hardware,threads", [("cpu-1", 1), ("cpu-4", 4)])
def test_a_stage_planned_at_3_replicas_runs_exactly_3_replicas(tmp_path, api_server, node_cores, hardware,
                                                                   threads):
    """The manifests, the tuner's scale request and each pod's worker agree: 3 planned replicas are 3
    replicas in total on a node of any core count, in pods whose CPU limits hold them."""
    from slipstream.streams.placement import layout, replica_cap

    plan = plan_file(tmp_path, {"detect": (hardware, 3), "classify": ("cpu-1", 1)})
    docs = render(tmp_path, "--plan", str(plan))
    det = pod(by_name(docs)["slipstream-shop-detect"])["containers"][0]
    k = int(det["args"][det["args"].index("--max-replicas") + 1])
    tuner_args = pod(by_name(docs)["slipstream-shop-tuner"])["containers"][0]["args"]
    per_pod = dict(a.split("=") for i, a in enumerate(tuner_args) if tuner_args[i - 1] == "--pod-replicas")
    assert int(per_pod["detect"]) == k
    act = _actuator(api_server, per_pod={s: int(v) for s, v in per_pod.items()})
    act.set_replicas("detect", 3)  # what the tuner does with the plan's replicas
    pods = _ApiServer.requests[-1][3]["spec"]["replicas"]
    cpu_limit = float(det["resources"]["limits"]["cpu"])
    # each pod's worker: --max-replicas bounded by its cgroup's CPU limit, the replicas from its StageConfig
    per_worker = layout(3, replica_cap(k, cpu_limit, cpu_count=node_cores)).per_worker
    assert pods * per_worker == 3
    assert per_worker * threads <= cpu_limit and det["resources"]["requests"] == det["resources"]["limits"]


def test_standby_pods_hold_the_model_beside_the_replicas_pods(tmp_path, api_server):
    """With --standby 1 the tuner keeps one warm pod per stage beyond what its replicas need (none at
    0 replicas), reads the replicas back without it, and the join runs one pod more."""
    docs = by_name(render(tmp_path, "--standby", "1"))
    tuner_args = pod(docs["slipstream-shop-tuner"])["containers"][0]["args"]
    assert tuner_args[tuner_args.index("--standby") + 1] == "1"
    assert docs["slipstream-shop-join"]["spec"]["replicas"] == 2
    (tmp_path / "d").mkdir()
    default_args = pod(by_name(render(tmp_path / "d"))["slipstream-shop-tuner"])["containers"][0]["args"]
    assert default_args[default_args.index("--standby") + 1] == "0"
    act = _actuator(api_server, per_pod={"detect": 2}, standby=1)
    for n in (3, 1, 0):
        act.set_replicas("detect", n)
    assert [b["spec"]["replicas"] for m, _, _, b in _ApiServer.requests if m == "PATCH"] == [3, 2, 0]
    act.set_replicas("detect", 3)
    _ApiServer.replicas = 3  # 2 pods of 2 replicas and the standby: 4 held, 3 asked
    assert act.replicas("detect") == 3
    _ApiServer.replicas = 2  # one pod lost: the standby holds no replica
    assert act.replicas("detect") == 2
    _ApiServer.replicas = 1
    assert act.replicas("detect") == 0
    with pytest.raises(ValueError):
        _actuator(api_server, standby=-1)


def test_pods_for_and_pod_replicas():
    from slipstream.k8s_manifests import pod_replicas
    from slipstream.streams.spec import Hardware

    cpu1 = Hardware("cpu-1", "cpu", 0.05, threads=1)
    cpu4 = Hardware("cpu-4", "cpu", 0.2, threads=4)
    gpu = Hardware("gpu", "cuda", 0.9, threads=2)
    assert [pod_replicas(n, cpu1) for n in (1, 3, 4, 7, 12, 16)] == [1, 3, 4, 7, 6, 8]  # <= 8 CPUs, n % k == 0
    assert [pod_replicas(n, cpu4) for n in (1, 2, 3, 4)] == [1, 2, 1, 2]
    assert pod_replicas(4, gpu) == 1 and pod_replicas(4, cpu1, max_pod_cpus=2) == 2
    assert [pods_for(n, 3) for n in (0, 1, 3, 4, 7)] == [0, 1, 1, 2, 3]
    assert [pods_for(n, 3, standby=1) for n in (0, 1, 3, 4, 7)] == [0, 2, 2, 3, 4]
    with pytest.raises(ValueError):
        pods_for(-1, 2)


def test_actuator_calls_end_at_their_timeout_when_the_api_server_does_not_answer():
    """A local server that accepts connections and never answers: each call fails at its timeout."""
    import socket
    import time

    from kubernetes import client

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    try:
        conf = client.Configuration(host=f"http://127.0.0.1:{listener.getsockname()[1]}")
        conf.retries = 0
        act = KubernetesActuator("shop", "ml", apps=client.AppsV1Api(client.ApiClient(conf)), timeout_s=0.5)
        for call in (lambda: act.set_replicas("detect", 3), lambda: act.replicas("detect")):
            t0 = time.monotonic()
            with pytest.raises(Exception, match="[Tt]imed? ?out"):
                call()
            assert time.monotonic() - t0 < 5
    finally:
        listener.close()


def test_actuator_explains_a_missing_client(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "kubernetes", None)  # import kubernetes -> ImportError
    with pytest.raises(RuntimeError, match=r"slipstream\[k8s\]"):
        KubernetesActuator("p")


def test_scale_apply_and_names():
    assert scale_apply("d", "ns", 5)["spec"] == {"replicas": 5}
    with pytest.raises(ValueError):
        scale_apply("d", "ns", -1)
    assert len(deployment_name("x" * 40, "y" * 40)) <= 63


def test_the_gateway_is_served_probed_and_scaled(tmp_path):
    docs = render(tmp_path, "--namespace", "ml")
    gw = {d["kind"]: d for d in docs if d["metadata"]["name"] == "slipstream-shop-gateway"}
    assert sorted(gw) == ["Deployment", "HorizontalPodAutoscaler", "Service"]
    p = pod(gw["Deployment"])
    c = p["containers"][0]
    assert c["args"] == ["gateway", "--pipeline", SPEC_PATH, "--addr", "0.0.0.0:8080", "--grpc-port", "8081"]
    assert c["ports"] == [{"name": "http", "containerPort": 8080}, {"name": "grpc", "containerPort": 8081}]
    assert c["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    assert gw["Deployment"]["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == "8080"
    assert p["initContainers"][0]["args"][:1] == ["topics"] and "replicas" not in gw["Deployment"]["spec"]  # the HPA owns it
    sel = gw["Service"]["spec"]["selector"]
    assert all(gw["Deployment"]["spec"]["template"]["metadata"]["labels"][k] == v for k, v in sel.items())
    assert gw["Service"]["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http"},
                                              {"name": "grpc", "port": 8081, "targetPort": "grpc"}]
    assert gw["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]["name"] == "slipstream-shop-gateway"
    assert gw["HorizontalPodAutoscaler"]["spec"]["minReplicas"] == 2
