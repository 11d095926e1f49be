"""What the cluster end-to-end tests (``tests/k8s/e2e_*.py``) ask of the local cluster: the broker on
the node's bridge, the ``slipstream`` CLI, kubectl calls, the overlay that fits the generated manifests
to a one-node, two-core cluster, and a watch that stamps every pod and Deployment change with this
host's clock (the timings of a scale-up)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from slipstream.streams.config import BOOTSTRAP_ENV, KafkaSettings, bootstrap_from_env

# the node has 2 cores: the generated requests (1 CPU per worker: requests = limits) would not fit
# the 7 pods of the test; the overlay lowers every request and keeps every limit (a worker still
# reads a 1-CPU quota from its cgroup)
REQUEST_CPU = "100m"
ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def bridge_kafka() -> KafkaSettings:
    """The broker ``make k8s-e2e`` starts on the node's bridge, reached by the pods and by this host."""
    boot = bootstrap_from_env()
    assert boot and "127.0.0.1" not in boot, (
        f"{BOOTSTRAP_ENV} must name the broker on the node's bridge (make k8s-e2e starts it)")
    return KafkaSettings(bootstrap=boot)


def slipstream_cli(*args: str) -> str:
    """``slipstream ARGS`` in this venv: its stdout, or AssertionError with its output."""
    r = subprocess.run([sys.executable, "-m", "slipstream.cli", *args], capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0, f"slipstream {' '.join(args)}:\n{r.stdout[-2000:]}{r.stderr[-3000:]}"
    return r.stdout


def kubectl(*args: str, stdin: str | None = None, check: bool = True, timeout: float = 180) -> str:
    """kubectl on ``$KUBECONFIG``; its output, or AssertionError with its stderr."""
    r = subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True, timeout=timeout)
    if check:
        assert r.returncode == 0, f"kubectl {' '.join(args)}: exit {r.returncode}\n{r.stderr}{r.stdout[-2000:]}"
    return r.stdout


def kube_json(*args: str) -> Any:
    return json.loads(kubectl(*args, "-o", "json"))


def pods(namespace: str, selector: str) -> list[dict]:
    return kube_json("get", "pods", "-n", namespace, "-l", selector)["items"]


def can_i(verb: str, resource: str, name: str, namespace: str, who: str, subresource: str = "") -> bool:
    """``kubectl auth can-i`` for ``who`` (exit 0: yes, 1: no)."""
    args = ["auth", "can-i", verb, f"{resource}/{name}" if name else resource, "-n", namespace, "--as", who]
    args += ["--subresource", subresource] if subresource else []
    r = subprocess.run(["kubectl", *args], capture_output=True, text=True, timeout=30)
    assert r.stdout.strip() in ("yes", "no"), r.stdout + r.stderr
    return r.stdout.strip() == "yes"


def render(spec: Path, tmp: Path, bootstrap: str, batch_sizes: str) -> Path:
    """Profile ``spec`` on this host, render its objects with ``slipstream k8s-manifests`` into
    ``tmp/base`` for the namespace of the pipeline's name (created and labelled here), and write the
    overlay that fits them to the node: the directory to ``kubectl apply -k``."""
    name = yaml.safe_load(spec.read_text())["name"]
    slipstream_cli("profile", "--pipeline", str(spec), "--out", str(tmp / "profiles"), "--hardware", "cpu-1",
                   "--batch-sizes", batch_sizes, "--reps", "5")
    slipstream_cli("k8s-manifests", "--pipeline", str(spec), "--image", f"slipstream:{VERSION}",
                   "--control-image", f"slipstream:{VERSION}-control", "--profiles", str(tmp / "profiles"),
                   "--namespace", name, "--bootstrap", bootstrap, "--out", str(tmp / "base"))
    overlay = write_overlay(tmp / "base", tmp / "overlay")
    kubectl("create", "namespace", name)
    kubectl("label", "namespace", name, "slipstream.io/e2e=true")
    return overlay


def write_overlay(base: Path, out: Path) -> Path:
    """A kustomization over ``base`` (``slipstream k8s-manifests --out``) lowering each container's and
    init container's CPU request to ``REQUEST_CPU`` (limits kept), by a strategic-merge patch per
    Deployment (containers merge by name)."""
    out.mkdir(parents=True, exist_ok=True)
    patches = []
    for doc in (yaml.safe_load(p.read_text()) for p in sorted(base.glob("*.yaml"))):
        if doc.get("kind") != "Deployment":
            continue
        spec = doc["spec"]["template"]["spec"]
        patch = {"apiVersion": "apps/v1", "kind": "Deployment",
                 "metadata": {"name": doc["metadata"]["name"], "namespace": doc["metadata"]["namespace"]},
                 "spec": {"template": {"spec": {
                     key: [{"name": c["name"], "resources": {"requests": {"cpu": REQUEST_CPU}}} for c in spec[key]]
                     for key in ("containers", "initContainers") if spec.get(key)}}}}
        name = f"requests-{doc['metadata']['name']}.yaml"
        (out / name).write_text(yaml.safe_dump(patch, sort_keys=False))
        patches.append({"path": name})
    (out / "kustomization.yaml").write_text(yaml.safe_dump(
        {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
         "resources": [os.path.relpath(base, out)], "patches": patches}, sort_keys=False))
    return out


@dataclass
class Watch:
    """Pods and Deployments of a namespace as they change, each change stamped (``time.time_ns``)
    when it arrived: ``pods[name]`` and ``deployments[name]`` are lists of (ns, object dict)."""

    namespace: str
    pods: dict[str, list[tuple[int, dict]]] = field(default_factory=dict)
    deployments: dict[str, list[tuple[int, dict]]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def start(self) -> "Watch":
        from kubernetes import client, config

        config.load_kube_config()
        core, apps = client.CoreV1Api(), client.AppsV1Api()
        for kind, lister, into in (("pods", core.list_namespaced_pod, self.pods),
                                   ("deployments", apps.list_namespaced_deployment, self.deployments)):
            threading.Thread(target=self._run, args=(lister, into), name=f"watch-{kind}", daemon=True).start()
        return self

    def _run(self, lister, into) -> None:
        """List and watch, again from a fresh list when the server ends the watch: a resumed watch can
        be refused ("Too large resource version", 504) by an API server whose cache lags etcd 3.4."""
        from kubernetes import client, watch

        api = client.ApiClient()
        while not self._stop.is_set():
            w = watch.Watch()
            try:
                for ev in w.stream(lister, self.namespace, timeout_seconds=60):
                    obj = api.sanitize_for_serialization(ev["object"])
                    with self._cond:
                        into.setdefault(obj["metadata"]["name"], []).append((time.time_ns(), obj))
                        self._cond.notify_all()
                    if self._stop.is_set():
                        w.stop()
            except client.ApiException as exc:
                if exc.status != 504:
                    raise

    def stop(self) -> None:
        self._stop.set()

    def first(self, kind: str, name: str, pred) -> int | None:
        """When the first change of ``name`` satisfying ``pred(obj)`` arrived (ns), or None."""
        with self._cond:
            return next((t for t, o in getattr(self, kind).get(name, []) if pred(o)), None)

    def wait(self, kind: str, pred, timeout_s: float) -> tuple[str, int]:
        """Block until an object of ``kind`` changes to satisfy ``pred(obj)``: (its name, when)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                for name, changes in getattr(self, kind).items():
                    hit = next((t for t, o in changes if pred(o)), None)
                    if hit is not None:
                        return name, hit
                left = deadline - time.monotonic()
                assert left > 0, f"no {kind} change as expected within {timeout_s:g} s"
                self._cond.wait(left)


def condition_true(obj: dict, kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True" for c in (obj.get("status") or {}).get("conditions") or [])


def running(obj: dict, container: str) -> bool:
    return any(s["name"] == container and (s.get("state") or {}).get("running")
               for s in (obj.get("status") or {}).get("containerStatuses") or [])
