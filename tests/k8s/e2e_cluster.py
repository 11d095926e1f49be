"""The pipeline on a real Kubernetes cluster (``make k8s-e2e``; docs/kubernetes.md, section 10): the
local cluster of ``deploy/k8s/local-cluster.sh`` (``KUBECONFIG``), the broker on the node's bridge
address (``SLIPSTREAM_BOOTSTRAP``), the ``cpu`` and ``control`` images imported into its containerd.

The objects are ``slipstream k8s-manifests`` output for ``deploy/k8s/e2e/pipeline.yaml`` (a fresh
pipeline name and namespace each run, profiled here first), applied with ``kubectl apply -k`` through
an overlay that only lowers CPU requests (``tests/k8s/kube.py``: the node has two cores). Then:

- every object passes a server-side dry run, and the tuner's ServiceAccount may do exactly what
  ``slipstream.tuner.k8s.SCALE_RULE`` says (``kubectl auth can-i --as``);
- the gateway pod answers an Open Inference Protocol request, served by the stage pods;
- a force-deleted worker pod is replaced and no request goes unanswered;
- a SIGSTOPped worker is restarted by its liveness probe;
- last (it grows partitions and scales), a step of the offered rate makes the tuner scale ``pace``
  from 1 pod to more, by server-side apply under its field manager (another manager's apply is
  refused), the new pod serves and every request is answered (served, or dropped at its deadline);
  the time from its decision to the new pod serving is split and written to
  ``reports/k8s-e2e/figures.json``;
- the same step against ``slipstream up`` (local worker processes and the tuner) on this host: the
  baseline for the cluster's attainment during the step.

The demo pipeline itself runs first, in ``e2e_demo.py``.

Not collected by the default test run (the file name does not match ``test_*.py``): run by path.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import struct
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from slipstream.loadgen.collect import check_exactly_once
from slipstream.streams import topics
from slipstream.streams.client import PipelineClient, make_request
from slipstream.streams.config import BOOTSTRAP_ENV, KafkaSettings
from slipstream.streams.spec import load_pipeline
from tests.integration.helpers import as_records, read_topic, results_of
from tests.k8s.kube import (ROOT, Watch, bridge_kafka, can_i, condition_true, kube_json, kubectl, pods, render,
                            running, slipstream_cli)
from slipstream.tuner.k8s import APPLY, FIELD_MANAGER, deployment_name

SPEC = ROOT / "deploy" / "k8s" / "e2e" / "pipeline.yaml"
FIGURES = ROOT / "reports" / "k8s-e2e" / "figures.json"
SCALED = "pace"  # the stage the rate step overloads (20 ms an item: about 50 items/s a pod)
LOW_QPS, HIGH_QPS = 15.0, 75.0
PAYLOAD = b"slip"  # pace holds payloads starting with it (deploy/k8s/e2e/pipeline.yaml)
FIG: dict = {}


@pytest.fixture(scope="module")
def kafka() -> KafkaSettings:
    return bridge_kafka()


@pytest.fixture(scope="module")
def app(tmp_path_factory, kafka):
    """The rendered, dry-run and applied pipeline: (pipeline, namespace, watch, dry-run output)."""
    assert os.environ.get("KUBECONFIG") and shutil.which("kubectl"), "KUBECONFIG: deploy/k8s/local-cluster.sh env"
    tmp = tmp_path_factory.mktemp("k8s")
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    spec = tmp / "pipeline.yaml"
    spec.write_text(SPEC.read_text().replace("name: k8s-e2e", f"name: {name}", 1))
    overlay = render(spec, tmp, kafka.bootstrap, "1,2,4,8")
    dry = kubectl("apply", "-k", str(overlay), "--dry-run=server")
    watch = Watch(name).start()
    t0 = time.time_ns()
    kubectl("apply", "-k", str(overlay))
    kubectl("wait", "--for=condition=Available", "deployment", "--all", "-n", name, "--timeout=300s", timeout=320)
    FIG["apply_to_available_s"] = round((time.time_ns() - t0) / 1e9, 1)
    yield load_pipeline(spec), name, watch, dry
    watch.stop()
    FIGURES.parent.mkdir(parents=True, exist_ok=True)
    FIGURES.write_text(json.dumps(FIG, indent=2) + "\n")
    print("\nfigures:", json.dumps(FIG))
    if not os.environ.get("SLIPSTREAM_K8S_KEEP"):
        kubectl("delete", "namespace", name, "--wait=false", check=False)


def stage_selector(pipe, stage: str) -> str:
    return f"slipstream.io/pipeline={pipe.name},slipstream.io/stage={stage}"


# ------------------------------------------------------------------------------------- objects, RBAC


def test_every_object_passes_a_server_side_dry_run(app):
    pipe, ns, _, dry = app
    lines = [ln for ln in dry.splitlines() if ln.strip()]
    kinds = {ln.split("/")[0] for ln in lines}
    assert all("(server dry run)" in ln for ln in lines), dry
    assert {"configmap", "deployment.apps", "role.rbac.authorization.k8s.io", "rolebinding.rbac.authorization.k8s.io",
            "serviceaccount", "service", "horizontalpodautoscaler.autoscaling"} <= kinds, dry
    assert len(lines) == len(kube_json("get", "configmaps,deployments,roles,rolebindings,serviceaccounts,services,hpa",
                                       "-n", ns, "-l", f"slipstream.io/pipeline={pipe.name}")["items"])


def test_the_tuner_may_read_and_apply_the_stages_scale_and_nothing_else(app):
    pipe, ns, _, _ = app
    sa = f"system:serviceaccount:{ns}:{deployment_name(pipe.name, 'tuner')}"
    stage = deployment_name(pipe.name, SCALED)
    assert can_i("get", "deployments", stage, ns, sa, "scale") and can_i("patch", "deployments", stage, ns, sa, "scale")
    refused = [("update", "deployments", stage, "scale"), ("patch", "deployments", stage, ""),
               ("get", "deployments", stage, ""), ("get", "pods", "", ""), ("delete", "pods", "", ""),
               ("patch", "deployments", deployment_name(pipe.name, "gateway"), "scale"),
               ("patch", "deployments", deployment_name(pipe.name, "planner"), "scale")]
    for verb, res, name, sub in refused:
        assert not can_i(verb, res, name, ns, sa, sub), (verb, res, name, sub)
    assert not can_i("patch", "deployments", stage, "default", sa, "scale")
    FIG["rbac"] = "get, patch deployments/scale of the stage Deployments only"


# ------------------------------------------------------------------------------------- serving


def infer(pod_ip: str, model: str, payload: bytes) -> dict:
    body = json.dumps({"inputs": [{"name": "input", "shape": [1], "datatype": "BYTES",
                                   "data": [payload.decode()]}]}).encode()
    req = urllib.request.Request(f"http://{pod_ip}:8080/v2/models/{model}/infer", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200
        body = resp.read()
        head = int(resp.headers.get("Inference-Header-Content-Length") or len(body))  # binary outputs follow
        answer = json.loads(body[:head])
        # pace and relay return their input: one BYTES element, its 4-byte length first
        assert body[head:] == struct.pack("<I", len(payload)) + payload, body[head:]
        return answer


def test_the_gateway_answers_through_the_stage_pods(app):
    pipe, ns, _, _ = app
    gateways = [p for p in pods(ns, f"slipstream.io/pipeline={pipe.name},slipstream.io/role=gateway")
                if condition_true(p, "Ready")]
    assert gateways, "no gateway pod is ready"
    answer = infer(gateways[0]["status"]["podIP"], pipe.name, PAYLOAD + b"-gateway")
    params = answer["parameters"]
    assert params["status"] == "done", params
    stage_pods = {s: {p["metadata"]["name"] for p in pods(ns, stage_selector(pipe, s))} for s in ("relay", "pace")}
    hops = [(h["stage"], h["worker"].split("/")[0].rsplit("-", 1)[0]) for h in params["hops"]]
    assert [s for s, _ in hops] == ["relay", "pace"], hops
    assert all(pod in stage_pods[s] for s, pod in hops), (hops, stage_pods)
    FIG["gateway_latency_ms"] = round(params["latency_ms"], 1)


# ------------------------------------------------------------------------------------- failures


def test_a_killed_pod_is_replaced_and_no_request_is_lost(app, kafka):
    """The relay's one pod (the tuner leaves relay at one: its model is instant), force-deleted under load."""
    pipe, ns, watch, _ = app
    dep = deployment_name(pipe.name, "relay")
    before = {p["metadata"]["name"] for p in pods(ns, stage_selector(pipe, "relay"))}
    victim, killed = sorted(before)[0], []

    async def run() -> list[str]:
        async with PipelineClient(pipe, kafka) as client:
            ids = await send_open_loop(client, pipe, 20.0, 5, "before-kill")  # the kill lands mid-stream
            killed.append(time.time_ns())
            kubectl("delete", "pod", victim, "-n", ns, "--grace-period=0", "--force", "--wait=false")
            ids += await send_open_loop(client, pipe, 20.0, 15, "after-kill")
            await results_of(client, ids, 180)
            return ids

    ids = asyncio.run(run())
    replaced, ready = watch.wait("pods", lambda p: p["metadata"]["name"] not in before and condition_true(p, "Ready")
                                 and p["metadata"]["labels"].get("slipstream.io/stage") == "relay", 180)
    kubectl("wait", "--for=condition=Available", f"deployment/{dep}", "-n", ns, "--timeout=180s", timeout=200)
    raw = asyncio.run(read_topic(kafka, topics.results(pipe.name), len(ids), short_ok=True))
    delivery = check_exactly_once(as_records(r for r in raw if r["request_id"] in set(ids)), ids)
    assert not delivery.missing and not delivery.conflicting, str(delivery)
    FIG["kill"] = {"requests": len(ids), "missing": len(delivery.missing), "duplicates": len(delivery.duplicates),
                   "replacement_ready_s": round((ready - killed[0]) / 1e9, 1)}


def test_a_stopped_worker_is_restarted_by_its_liveness_probe(app):
    pipe, ns, watch, _ = app
    pod = next(p for p in pods(ns, stage_selector(pipe, "relay")) if condition_true(p, "Ready"))
    name = pod["metadata"]["name"]
    status = next(s for s in pod["status"]["containerStatuses"] if s["name"] == "worker")
    pid = task_pid(status["containerID"].split("://", 1)[1])
    t0 = time.time_ns()
    os.kill(pid, 19)  # SIGSTOP: the process holds its sockets but answers nothing
    kubectl("wait", f"pod/{name}", "-n", ns, "--for=jsonpath={.status.containerStatuses[0].restartCount}="
            f"{status['restartCount'] + 1}", "--timeout=120s", timeout=140)
    _, restarted = watch.wait("pods", lambda p: p["metadata"]["name"] == name and any(
        s["name"] == "worker" and s["restartCount"] > status["restartCount"] for s in p["status"].get("containerStatuses") or []), 30)
    events = kubectl("get", "events", "-n", ns, "--field-selector", f"involvedObject.name={name}", "-o", "json")
    assert "Liveness probe failed" in events, events[-2000:]
    kubectl("wait", f"pod/{name}", "-n", ns, "--for=condition=Ready", "--timeout=180s", timeout=200)
    _, ready = watch.wait("pods", lambda p: p["metadata"]["name"] == name and condition_true(p, "Ready") and any(
        s["restartCount"] > status["restartCount"] for s in p["status"].get("containerStatuses") or []), 30)
    FIG["liveness"] = {"stop_to_restart_s": round((restarted - t0) / 1e9, 1),
                       "stop_to_ready_again_s": round((ready - t0) / 1e9, 1)}


def task_pid(container_id: str) -> int:
    """The host PID of a container's main process, from the cluster's containerd."""
    sock = Path(os.environ.get("K8S_STATE", ROOT / ".state" / "k8s-cluster")) / "containerd" / "containerd.sock"
    out = subprocess.run(["ctr", "-a", str(sock), "-n", "k8s.io", "tasks", "ls"], capture_output=True, text=True,
                         check=True).stdout
    return next(int(ln.split()[1]) for ln in out.splitlines() if ln.startswith(container_id))


# ------------------------------------------------------------------------------------- scaling


async def send_open_loop(client: PipelineClient, pipe, rate_qps: float, seconds: float, tag: str) -> list[str]:
    """Requests at a fixed rate (never awaiting results), payloads ``PAYLOAD-tag-i``; their ids."""
    ids, sent, start = [], [], time.monotonic()
    n = int(rate_qps * seconds)
    for i in range(n):
        await asyncio.sleep(max(0.0, start + i / rate_qps - time.monotonic()))
        req = make_request(pipe, PAYLOAD + f"-{tag}-{i}".encode())
        sent.append(await client.send(req, wait=False))
        ids.append(req.request_id)
    await asyncio.gather(*sent)  # each in Kafka: a send that failed fails here, not as a missing result
    return ids


def decision_of(kafka, pipe, stage: str) -> dict:
    """The tuner's ScalingAction that grew ``stage`` (its decision time ``at_ns``)."""
    recs = asyncio.run(read_topic(kafka, topics.scaling(pipe.name), 1, record="ScalingAction", idle_s=1.0))
    ups = [r for r in recs if r["stage"] == stage and r["replicas"] > r["previous_replicas"]]
    assert ups, recs
    return ups[0]


def test_the_tuner_scales_a_stage_and_the_new_pod_serves(app, kafka):
    pipe, ns, watch, _ = app
    dep = deployment_name(pipe.name, SCALED)
    assert kube_json("get", "deployment", dep, "-n", ns)["spec"]["replicas"] == 1
    before = {p["metadata"]["name"] for p in pods(ns, stage_selector(pipe, SCALED))}

    async def run() -> tuple[list[dict], list[str]]:
        async with PipelineClient(pipe, kafka) as client:
            low = await send_open_loop(client, pipe, LOW_QPS, 20, "low")
            high_task = asyncio.create_task(send_open_loop(client, pipe, HIGH_QPS, 60, "high"))
            # the tuner's apply reaching the API server, seen by the watch (not a sleep)
            await asyncio.to_thread(watch.wait, "deployments",
                                    lambda d: d["metadata"]["name"] == dep and d["spec"]["replicas"] >= 2, 60)
            high = await high_task
            results = await results_of(client, low + high, 180)
            for _ in range(12):  # the step's rate, 5 s at a time, until a new pod has served (60 s at most)
                if served_by(results) - before:
                    break
                more = await send_open_loop(client, pipe, HIGH_QPS, 5, f"more{len(high)}")
                high += more
                results += await results_of(client, more, 180)
            return results, high

    results, high = asyncio.run(run())
    scaled = kube_json("get", "deployment", dep, "-n", ns, "--show-managed-fields")
    owners = [m for m in scaled["metadata"]["managedFields"] if "f:replicas" in m.get("fieldsV1", {}).get("f:spec", {})]
    assert [(m["manager"], m["operation"], m.get("subresource")) for m in owners] == [(FIELD_MANAGER, "Apply", "scale")]
    new = sorted(served_by(results) - before)
    assert new, f"no pod but {before} served {SCALED}"
    # every request answered: served, or dropped at its deadline while the step overloads one pod
    assert {r.status for r in results} <= {"done", "dropped"}, [r.reason for r in results if r.status == "error"][:5]
    first_new = min(new, key=lambda pod: watch.pods[pod][0][0])  # the first created: the first decision's
    FIG.update(scale_figures(kafka, pipe, watch, dep, first_new, results, set(high)))
    conflict = other_manager_apply(dep, ns)
    assert conflict == 409, conflict


def served_by(results: list[dict]) -> set[str]:
    """The pods whose workers served ``SCALED`` in ``results`` (a worker is named pod-pid/replica)."""
    return {h.worker.split("/")[0].rsplit("-", 1)[0] for r in results for h in r.hops if h.stage == SCALED}


def scale_figures(kafka, pipe, watch: Watch, dep: str, pod: str, results: list[dict], high: set[str]) -> dict:
    """Decision -> new pod serving, split: the tuner's decision (its ScalingAction), the apply seen,
    the pod scheduled, its worker container running, the pod ready, its first request served; and
    the share of the step's requests (``high``) answered within the SLO."""
    decision = decision_of(kafka, pipe, SCALED)
    at = decision["at_ns"]
    applied = watch.first("deployments", dep, lambda d: d["spec"]["replicas"] >= 2)
    scheduled = watch.first("pods", pod, lambda p: condition_true(p, "PodScheduled"))
    started = watch.first("pods", pod, lambda p: running(p, "worker"))
    ready = watch.first("pods", pod, lambda p: condition_true(p, "Ready"))
    first = min(h.started_ns for r in results for h in r.hops if h.worker.startswith(pod))
    ms = lambda a, b: round((b - a) / 1e6)  # noqa: E731
    return {"decision": f"{decision['previous_replicas']} -> {decision['replicas']} replicas at "
                        f"{decision['live_rate_qps']:.0f} qps live", "requests": len(results),
            "decision_to_apply_ms": ms(at, applied), "apply_to_scheduled_ms": ms(applied, scheduled),
            "scheduled_to_running_ms": ms(scheduled, started), "running_to_ready_ms": ms(started, ready),
            "ready_to_first_served_ms": ms(ready, first), "decision_to_first_served_ms": ms(at, first),
            **step_attainment(pipe, results, high)}


def other_manager_apply(dep: str, ns: str) -> int:
    """Another field manager's server-side apply of the scale, unforced: the HTTP status it gets."""
    from kubernetes import client, config

    config.load_kube_config()
    body = {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": dep, "namespace": ns},
            "spec": {"replicas": 1}}
    try:
        client.AppsV1Api().patch_namespaced_deployment_scale(dep, ns, body, field_manager="someone-else",
                                                             _content_type=APPLY)
    except client.ApiException as exc:
        return exc.status
    return 200


# ------------------------------------------------------------------------------------- the same step, local


def test_the_same_step_on_local_processes(app, kafka, tmp_path):
    """The scale test's step against ``slipstream up`` (the local-process supervisor and tuner) on this
    host, the same spec and broker: the baseline the cluster's attainment during the step is read against."""
    pipe_k8s, *_ = app
    name = f"local-{uuid.uuid4().hex[:6]}"
    spec = tmp_path / "pipeline.yaml"
    spec.write_text(SPEC.read_text().replace("name: k8s-e2e", f"name: {name}", 1))
    pipe = load_pipeline(spec)
    profiles = tmp_path / "profiles"
    slipstream_cli("topics", "--pipeline", str(spec))  # before the client reads the results topic
    slipstream_cli("profile", "--pipeline", str(spec), "--out", str(profiles), "--hardware", "cpu-1",
                   "--batch-sizes", "1,2,4,8", "--reps", "10")
    up = subprocess.Popen([sys.executable, "-m", "slipstream.cli", "up", "--pipeline", str(spec), "--profiles",
                           str(profiles), "--trace", f"poisson:rate={LOW_QPS:g},duration=20", "--log-dir",
                           str(tmp_path / "workers")], cwd=ROOT, stdout=open(tmp_path / "up.log", "wb"),
                          stderr=subprocess.STDOUT, env={**os.environ, BOOTSTRAP_ENV: kafka.bootstrap})

    async def run() -> tuple[list[dict], list[str], set[str]]:
        async with PipelineClient(pipe, kafka) as client:
            first = await send_open_loop(client, pipe, 1.0, 1, "ready")
            warm = await results_of(client, first, 180)  # the pipeline answers: it is up
            low = await send_open_loop(client, pipe, LOW_QPS, 20, "low")
            before = workers_of(warm + await results_of(client, low, 180))
            high = await send_open_loop(client, pipe, HIGH_QPS, 60, "high")
            return await results_of(client, low + high, 180), high, before

    try:
        results, high, before = asyncio.run(run())
    finally:
        up.terminate()
        up.wait(60)
    new = workers_of(results) - before
    assert new, f"no worker but {before} served {SCALED}: {(tmp_path / 'up.log').read_text()[-3000:]}"
    decision = decision_of(kafka, pipe, SCALED)
    first = min(h.started_ns for r in results for h in r.hops if h.worker in new)
    FIG["local_step"] = {"decision": f"{decision['previous_replicas']} -> {decision['replicas']} replicas",
                         "decision_to_first_served_ms": round((first - decision["at_ns"]) / 1e6),
                         **step_attainment(pipe, results, set(high))}
    FIG["k8s_vs_local_step_attainment"] = [FIG.get("attainment_step"), FIG["local_step"]["attainment_step"]]
    assert pipe_k8s.slo_ms == pipe.slo_ms


def workers_of(results: list[dict]) -> set[str]:
    """The replicas (host-pid/replica: a local worker process holds one or more) that served ``SCALED``."""
    return {h.worker for r in results for h in r.hops if h.stage == SCALED}


def step_attainment(pipe, results: list[dict], high: set[str]) -> dict:
    """The step's requests (``high``): how many, dropped, and the share answered within the SLO."""
    step = [r for r in results if r.request_id in high]
    slo = pipe.slo_ms * 1e6
    return {"step_requests": len(step), "dropped_step": sum(r.status == "dropped" for r in step),
            "attainment_step": round(sum(r.status == "done" and r.finished_ns - r.created_ns <= slo
                                         for r in step) / len(step), 4)}
