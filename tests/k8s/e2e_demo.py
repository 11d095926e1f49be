"""The demo pipeline on the real cluster (``make k8s-e2e``; docs/kubernetes.md, section 10):
``deploy/pipelines/image-classify.yaml``, a JPEG resized by one stage's pods and classified by
EfficientNet-Lite in another's, answered through a gateway pod.

The worker image carries no torch (the ``cpu`` image: onnxruntime only), so the classifier variants
reach the pods as ONNX files: this host's exports of the same three EfficientNet-Lite models (the
files ``make demo`` serves) become ``model: onnx`` variants with ``params.uri`` and the file's
sha256, served over HTTP on the node's bridge. The stage's Deployment then fetches each file with a
``slipstream fetch-model`` init container into an emptyDir, and the worker loads it read-only: the
path docs/kubernetes.md (section 4) gives users for their own models, run here on a cluster.

Run before ``e2e_cluster.py`` (``deploy/k8s/e2e.sh``); its namespace is deleted when it ends, so the
two pipelines do not share the node's two cores.
"""
from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest
import yaml

from slipstream.agents.preprocess import encode_jpeg, synthetic_image
from slipstream.agents.zoo import efficientnet_onnx
from slipstream.agents.models.export import DEFAULT_CACHE_DIR
from slipstream.gateway.client import answer_result, infer_body
from slipstream.schemas.records import InferenceResult
from slipstream.streams.spec import load_pipeline
from slipstream.tuner.k8s import deployment_name
from tests.k8s.kube import ROOT, bridge_kafka, condition_true, kube_json, kubectl, pods, render

DEMO = ROOT / "deploy" / "pipelines" / "image-classify.yaml"
MODELS_STAGE = "classify"
FIG: dict = {}


@pytest.fixture(scope="module")
def kafka():
    return bridge_kafka()


def onnx_variants(doc: dict, models_dir, base_url: str) -> None:
    """The classifier's built-in EfficientNet-Lite variants as ``model: onnx`` files delivered by URI:
    the same network and preprocessing (``(x - 127) / 128`` at the variant's resolution, top-5 JSON)."""
    stage = next(s for s in doc["stages"] if s["name"] == MODELS_STAGE)
    for v in stage["variants"]:
        exported, _ = efficientnet_onnx(v["model"], DEFAULT_CACHE_DIR)
        path = models_dir / f"{v['name']}.onnx"
        path.write_bytes(exported.read_bytes())
        v["model"] = "onnx"
        v["params"] = {"path": str(path), "uri": f"{base_url}/{path.name}",
                       "digest": hashlib.sha256(path.read_bytes()).hexdigest(),
                       "content_type": "image/*", "mean": 127.0, "std": 128.0, "emit": "top5"}


@pytest.fixture(scope="module")
def model_server(tmp_path_factory, kafka):
    """An HTTP server of the exported models on the node's bridge address: (directory, base URL)."""
    models = tmp_path_factory.mktemp("demo-models")
    host = kafka.bootstrap.rsplit(":", 1)[0]
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(models))
    server = http.server.ThreadingHTTPServer((host, 0), handler)
    threading.Thread(target=server.serve_forever, name="model-server", daemon=True).start()
    yield models, f"http://{host}:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def demo(tmp_path_factory, kafka, model_server):
    """The demo pipeline rendered by ``slipstream k8s-manifests``, applied, every Deployment Available."""
    tmp = tmp_path_factory.mktemp("demo")
    name = f"demo-{uuid.uuid4().hex[:6]}"
    doc = yaml.safe_load(DEMO.read_text())
    doc["name"] = name
    onnx_variants(doc, *model_server)
    spec = tmp / "pipeline.yaml"
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))
    overlay = render(spec, tmp, kafka.bootstrap, "1,2,4")
    t0 = time.time_ns()
    kubectl("apply", "-k", str(overlay))
    kubectl("wait", "--for=condition=Available", "deployment", "--all", "-n", name, "--timeout=600s", timeout=620)
    FIG["demo_apply_to_available_s"] = round((time.time_ns() - t0) / 1e9, 1)
    yield load_pipeline(spec), name
    if not os.environ.get("SLIPSTREAM_K8S_KEEP"):
        kubectl("delete", "namespace", name, "--wait=true", "--timeout=120s", check=False, timeout=140)


def infer_jpeg(pod_ip: str, model: str, jpeg: bytes) -> InferenceResult:
    """An OIP infer request with the JPEG as binary data, to a gateway pod: the result it answers."""
    body, headers = infer_body(jpeg, content_type="image/jpeg")
    req = urllib.request.Request(f"http://{pod_ip}:8080/v2/models/{model}/infer", body, headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return answer_result(resp.status, resp.read(), resp.headers)
    except urllib.error.HTTPError as err:
        return answer_result(err.code, err.read(), err.headers)


def test_the_demo_pipeline_classifies_a_jpeg_through_its_pods(demo):
    pipe, ns = demo
    selector = f"slipstream.io/pipeline={pipe.name}"
    gateway = next(p for p in pods(ns, f"{selector},slipstream.io/role=gateway") if condition_true(p, "Ready"))
    stage_pods = {s.name: {p["metadata"]["name"] for p in pods(ns, f"{selector},slipstream.io/stage={s.name}")}
                  for s in pipe.stages}
    jpeg = encode_jpeg(synthetic_image(320, seed=7))
    for _ in range(30):  # the first answers may come while the classifier warms up: no sleep, a bound
        result = infer_jpeg(gateway["status"]["podIP"], pipe.name, jpeg)
        if result.status == "done":
            break
    assert result.status == "done", result
    top5 = json.loads(result.output)["top5"]
    assert len(top5) == 5 and all(0 <= i < 1000 and 0.0 <= p <= 1.0 for i, p in top5), top5
    hops = [(h.stage, h.worker.split("/")[0].rsplit("-", 1)[0]) for h in result.hops]
    assert [s for s, _ in hops] == ["resize", "classify"], hops
    assert all(pod in stage_pods[s] for s, pod in hops), (hops, stage_pods)
    FIG["demo_gateway_latency_ms"] = round((result.finished_ns - result.created_ns) / 1e6, 1)
    FIG["demo_variant"] = result.hops[-1].variant


def test_the_classifier_pods_fetched_their_models_by_uri(demo):
    """Each classify pod ran one ``fetch-model`` init container per variant, and each exited 0."""
    pipe, ns = demo
    for pod in pods(ns, f"slipstream.io/pipeline={pipe.name},slipstream.io/stage={MODELS_STAGE}"):
        inits = pod["status"].get("initContainerStatuses") or []
        fetched = [s for s in inits if s["name"].startswith("model-")]
        assert len(fetched) == len(pipe.stage(MODELS_STAGE).variants), inits
        assert all((s["state"].get("terminated") or {}).get("exitCode") == 0 for s in fetched), fetched
    spec = kube_json("get", "deployment", deployment_name(pipe.name, MODELS_STAGE), "-n", ns)["spec"]
    args = [c["args"] for c in spec["template"]["spec"]["initContainers"] if c["name"].startswith("model-")]
    assert all(a[0] == "fetch-model" and a[a.index("--uri") + 1].startswith("http://") for a in args), args
    FIG["demo_models_fetched"] = len(args)


@pytest.fixture(scope="module", autouse=True)
def figures():
    yield
    path = ROOT / "reports" / "k8s-e2e" / "figures-demo.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(FIG, indent=2) + "\n")
    print("\nfigures:", json.dumps(FIG))
