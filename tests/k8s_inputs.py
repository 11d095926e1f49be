"""Shared inputs of the Kubernetes tests: a pipeline with CPU and GPU hardware, a profile store, a plan."""
from __future__ import annotations

import json

import yaml
from click.testing import CliRunner

from slipstream.commands.k8s_manifests import k8s_manifests_cmd

SPEC = """
name: shop
slo_ms: 300
hardware:
  cpu-1: {kind: cpu, threads: 1, cost_per_hour: 0.05}
  cpu-4: {kind: cpu, threads: 4, cost_per_hour: 0.2, memory_gib: 6}
  gpu-1: {kind: cuda, threads: 2, cost_per_hour: 0.9, memory_gib: 16}
stages:
  - name: detect
    variants: [{name: v, model: synthetic, accuracy: 0.9}]
    defaults: {variant: v, hardware: gpu-1, replicas: 2, partitions: 4}
  - name: classify
    variants: [{name: w, model: noop, accuracy: 0.8}]
    defaults: {variant: w, hardware: cpu-4, replicas: 1, partitions: 6}
edges:
  - {from: detect, to: classify, fanout: 3.0, probability: 0.5}
"""


def inputs(tmp_path, spec: str = SPEC):
    """(spec file, profile store directory)."""
    path = tmp_path / "shop.yaml"
    path.write_text(spec)
    prof = tmp_path / "profiles"
    prof.mkdir(exist_ok=True)
    for name in ("v@gpu-1", "v@cpu-4", "w@cpu-4", "w@cpu-1"):
        (prof / f"{name}.json").write_text(json.dumps({"format": 1, "variant": name.split("@")[0]}))
    return path, prof


def plan_file(tmp_path, placements: dict[str, tuple[str, int]]):
    """A `slipstream plan --json` document placing each stage on (hardware, replicas)."""
    doc = {"mode": "milp", "feasible": True, "reason": "", "stages": [
        {"stage": s, "partitions": 4, "assignments": [
            {"variant": "v" if s == "detect" else "w", "hardware": hw, "max_batch": 4, "replicas": n,
             "weight": 1.0, "batch_timeout_ms": 5.0}]} for s, (hw, n) in placements.items()]}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    return path


def render(tmp_path, *args: str, spec: str = SPEC) -> list[dict]:
    path, prof = inputs(tmp_path, spec)
    r = CliRunner().invoke(k8s_manifests_cmd, ["--pipeline", str(path), "--image", "reg/slipstream:1",
                                               "--gpu-image", "reg/slipstream:1-cuda", "--profiles", str(prof),
                                               *args])
    assert r.exit_code == 0, r.output
    return list(yaml.safe_load_all(r.output))


def by_name(docs, kind: str = "Deployment") -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def pod(doc) -> dict:
    return doc["spec"]["template"]["spec"]
