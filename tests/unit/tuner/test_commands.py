"""The tuner's CLI commands, called as click objects (no broker: plan, manifests, bad input)."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from slipstream.commands.bench_tuner import tuner_bench
from slipstream.commands.tuner import k8s_manifests_cmd, tuner_cmd, tuner_plan_cmd

SPEC = """
name: shop
slo_ms: 300
hardware:
  cpu-1: {kind: cpu, threads: 1, cost_per_hour: 0.05}
  gpu-1: {kind: cuda, threads: 1, cost_per_hour: 0.9}
stages:
  - name: detect
    variants: [{name: v, model: m, accuracy: 0.9}]
    defaults: {variant: v, hardware: gpu-1, replicas: 2, partitions: 4}
  - name: classify
    variants: [{name: w, model: m2, accuracy: 0.8}]
    defaults: {variant: w, hardware: cpu-1, replicas: 1, partitions: 4}
edges:
  - {from: detect, to: classify, fanout: 3.0, probability: 0.5}
"""


def files(tmp_path):
    spec = tmp_path / "shop.yaml"
    spec.write_text(SPEC)
    rng = np.random.default_rng(0)
    sample = tmp_path / "sample.txt"
    np.savetxt(sample, np.cumsum(rng.exponential(1 / 40, 4000)))
    return spec, sample


def test_tuner_plan_writes_a_loadable_plan(tmp_path):
    spec, sample = files(tmp_path)
    out = tmp_path / "plan.json"
    r = CliRunner().invoke(tuner_plan_cmd, ["--pipeline", str(spec), "--sample", str(sample), "--mu", "detect=25",
                                            "--mu", "classify=60", "--replicas", "detect=3", "-o", str(out)])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["pipeline"] == "shop" and doc["mean_rate_qps"] == pytest.approx(40, rel=0.1)
    stages = {s["stage"]: s for s in doc["stages"]}
    assert stages["detect"]["replicas"] == 3 and stages["classify"]["replicas"] == 1
    assert stages["classify"]["visit_ratio"] == 1.5
    assert doc["windows_s"][0] == pytest.approx(1 / 25 + 1 / 60)  # longest path's sum of 1/mu
    assert doc["windows_s"][-1] <= 60


def test_tuner_plan_rejects_missing_mu_and_bad_pairs(tmp_path):
    spec, sample = files(tmp_path)
    r = CliRunner().invoke(tuner_plan_cmd, ["--pipeline", str(spec), "--sample", str(sample), "--mu", "detect=25",
                                            "-o", str(tmp_path / "p.json")])
    assert r.exit_code != 0 and "classify" in r.output
    r = CliRunner().invoke(tuner_plan_cmd, ["--pipeline", str(spec), "--sample", str(sample), "--mu", "detect",
                                            "-o", str(tmp_path / "p.json")])
    assert r.exit_code != 0 and "STAGE=NUMBER" in r.output


def test_tuner_needs_a_valid_plan(tmp_path):
    spec, _ = files(tmp_path)
    bad = tmp_path / "plan.json"
    bad.write_text("{}")
    r = CliRunner().invoke(tuner_cmd, ["--pipeline", str(spec), "--plan", str(bad), "--dry-run"])
    assert r.exit_code == 2 and "missing field" in r.output


def test_k8s_manifests_render_every_process_of_a_fanout_pipeline_join_included(tmp_path):
    spec, _ = files(tmp_path)
    r = CliRunner().invoke(k8s_manifests_cmd, ["--pipeline", str(spec), "--image", "img:1", "--replicas", "classify=5",
                                               "--namespace", "ml"])
    assert r.exit_code == 0, r.output
    docs = list(yaml.safe_load_all(r.output))
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    # the spec's fan-out edge needs a join: without its Deployment split requests never get a result
    assert sorted(deployments) == ["slipstream-shop-classify", "slipstream-shop-detect", "slipstream-shop-join",
                                   "slipstream-shop-planner", "slipstream-shop-tuner"]
    assert [d["kind"] for d in docs if d["kind"] != "Deployment"] == ["ConfigMap", "ServiceAccount", "Role",
                                                                      "RoleBinding"]
    assert yaml.safe_load(docs[0]["data"]["pipeline.yaml"])["name"] == "shop"
    assert all(d["metadata"]["namespace"] == "ml" for d in docs)
    det, cls, join = (deployments[f"slipstream-shop-{r}"] for r in ("detect", "classify", "join"))
    assert det["spec"]["replicas"] == 2 and cls["spec"]["replicas"] == 5 and join["spec"]["replicas"] == 1
    assert det["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert join["spec"]["template"]["spec"]["containers"][0]["args"][-2:] == ["--stage", "join"]
    tuner = deployments["slipstream-shop-tuner"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert tuner[:1] == ["tuner"] and tuner[tuner.index("--namespace") + 1] == "ml"
    assert deployments["slipstream-shop-planner"]["spec"]["template"]["spec"]["containers"][0]["args"][0] == "planner"


def test_k8s_manifests_reference_no_configmap_they_do_not_write_but_the_broker_address(tmp_path):
    """The tuner takes its plan from the control topic: no plan file, no ConfigMap nobody generates."""
    spec, _ = files(tmp_path)
    r = CliRunner().invoke(k8s_manifests_cmd, ["--pipeline", str(spec), "--image", "img:1"])
    docs = list(yaml.safe_load_all(r.output))
    written = {d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"}
    referenced = set()
    for d in docs:
        if d["kind"] == "Deployment":
            pod = d["spec"]["template"]["spec"]
            referenced |= {v["configMap"]["name"] for v in pod.get("volumes", []) if "configMap" in v}
            referenced |= {e["valueFrom"]["configMapKeyRef"]["name"] for c in pod["containers"]
                           for e in c.get("env", []) if "configMapKeyRef" in e.get("valueFrom", {})}
    assert referenced - written == {"slipstream-kafka"}  # deploy/k8s/kafka-configmap.yaml, the operator's
    tuner = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "slipstream-shop-tuner")
    assert "--plan" not in tuner["spec"]["template"]["spec"]["containers"][0]["args"]


def test_k8s_manifests_of_a_chain_have_no_join(tmp_path):
    spec, _ = files(tmp_path)
    chain = tmp_path / "chain.yaml"
    chain.write_text(SPEC.replace("fanout: 3.0", "fanout: 1.0"))
    r = CliRunner().invoke(k8s_manifests_cmd, ["--pipeline", str(chain), "--image", "img:1"])
    assert r.exit_code == 0, r.output
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(r.output) if d["kind"] == "Deployment"]
    assert "slipstream-shop-join" not in names and len(names) == 4


def test_k8s_manifests_are_valid_kubernetes_objects(tmp_path):
    """Against the Kubernetes 1.33 OpenAPI schemas that kubernetes-validate ships (offline), strict:
    unknown fields fail too."""
    import kubernetes_validate

    spec, _ = files(tmp_path)
    r = CliRunner().invoke(k8s_manifests_cmd, ["--pipeline", str(spec), "--image", "img:1"])
    for doc in yaml.safe_load_all(r.output):
        kubernetes_validate.validate(doc, "1.33", strict=True)
    bad = next(d for d in yaml.safe_load_all(r.output) if d["kind"] == "Deployment")
    bad["spec"]["template"]["spec"]["containers"][0]["argz"] = bad["spec"]["template"]["spec"]["containers"][0]["args"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, "1.33", strict=True)


def test_bench_reports_ratios_and_activation_of_any_command():
    ready = (f"{sys.executable} -c \"print('slipstream-worker ready stage=s partitions=0,1', flush=True); "
             "import time; time.sleep(30)\"")
    r = CliRunner().invoke(tuner_bench, ["--seconds", "1", "--rate", "2000", "--runs", "1", "--worker-cmd", ready,
                                   "--existing", "0", "--activation-runs", "1", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    names = [row["method"] for row in out["envelope_cost"]]
    assert names[0].startswith("tracker") and "deque-per-window" in names
    assert all(row["ns_per_arrival"] > 0 for row in out["envelope_cost"])
    assert out["activation"]["ok"] and out["activation"]["partitions"] == "0,1"
    assert 0 < out["activation"]["median_s"] < 30
