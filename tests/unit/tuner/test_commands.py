"""The tuner's CLI commands, called as click objects (no broker: plan, manifests, bad input)."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from slipstream.commands.bench_tuner import tuner_bench
from slipstream.commands.tuner import tuner_cmd
from slipstream.commands.tuner_plan import tuner_plan_cmd

SPEC = """
name: shop
slo_ms: 300
hardware:
  cpu-1: {kind: cpu, threads: 1, cost_per_hour: 0.05}
  gpu-1: {kind: cuda, threads: 1, cost_per_hour: 0.9}
stages:
  - name: detect
    variants: [{name: v, model: synthetic, accuracy: 0.9}]
    defaults: {variant: v, hardware: gpu-1, replicas: 2, partitions: 4}
  - name: classify
    variants: [{name: w, model: noop, accuracy: 0.8}]
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
