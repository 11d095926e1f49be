"""The plan and profile commands, called directly through click's CliRunner."""
from __future__ import annotations

import json

from click.testing import CliRunner

from slipstream.commands.plan import plan
from slipstream.commands.profile import profile

from planner_builders import example_problem_doc

PROBLEM = example_problem_doc(60, sim_seconds=20)


def write(tmp_path, doc):
    p = tmp_path / "problem.json"
    p.write_text(json.dumps(doc))
    return str(p)


def test_plan_json_has_every_stage_and_the_check(tmp_path):
    r = CliRunner().invoke(plan, ["--problem", write(tmp_path, PROBLEM), "--mode", "milp", "--json", "--explain"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["feasible"] and [s["stage"] for s in doc["stages"]] == ["detect", "classify"]
    a = doc["stages"][0]["assignments"][0]
    assert {"variant", "hardware", "max_batch", "replicas", "batch_timeout_ms"} <= set(a)
    assert doc["predicted_p99_ms"] <= 300 and doc["attainment"] >= 0.99
    assert doc["explain"] and doc["runner_up"] is not None


def test_plan_table_and_infeasible_exit_code(tmp_path):
    r = CliRunner().invoke(plan, ["--problem", write(tmp_path, PROBLEM), "--mode", "cg-peak", "--no-validate"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())  # rich wraps lines at the terminal width
    assert "cg-peak plan" in text and "predicted p99 not validated" in text
    tight = dict(PROBLEM, slo_ms=10)
    r = CliRunner().invoke(plan, ["--problem", write(tmp_path, tight), "--mode", "milp"])
    assert r.exit_code == 2 and "infeasible" in r.output


def test_plan_bad_problem_names_the_field(tmp_path):
    bad = json.loads(json.dumps(PROBLEM))
    bad["edges"][0]["fanout"] = "many"
    r = CliRunner().invoke(plan, ["--problem", write(tmp_path, bad)])
    assert r.exit_code != 0 and "edges[0].fanout" in r.output


def test_profile_import_cli(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("Model,Accel,Trials,batchsize,50th_pct,90th_pct,avg_latency(ms),Min,Max,Accuracy,Normalized_Accuracy\n"
                   "m,onnxruntime_cpu,10,1,2.0,3.0,2.1,1.9,4,70,90\n")
    r = CliRunner().invoke(profile, ["import", "--csv", str(csv), "--out", str(tmp_path / "store")])
    assert r.exit_code == 0, r.output
    assert "imported 1 profiles" in r.output
    assert (tmp_path / "store" / "m@onnxruntime-cpu.json").exists()


def test_plan_on_a_declared_host(tmp_path):
    # 60 qps take at least 11.1 ms of CPU a request (detect at 14 ms a batch of 8, classify at 25 ms a
    # batch of 4, x1.5): 0.67 cores, with 6 ms a request of co-located work 1.03 of 1
    problem = write(tmp_path, PROBLEM)
    r = CliRunner().invoke(plan, ["--problem", problem, "--json", "--host-cores", "8", "--host-request-cpu-ms", "10"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["feasible"] and doc["problem"]["host"] == {"cores": 8.0, "background_cores": 0.0, "request_cpu_ms": 10.0,
                                                          "window_cpu_ms": 0.0}
    # 2 ms a request and 2 a window, once per stage visit (1 + 1.5 at windows of one): 7 ms, more than 6
    r = CliRunner().invoke(plan, ["--problem", problem, "--json", "--host-cores", "1", "--host-request-cpu-ms", "2",
                                  "--host-window-cpu-ms", "2"])
    doc = json.loads(r.output)
    assert r.exit_code == 2 and not doc["feasible"] and "host" in doc["notes"][0]
    r = CliRunner().invoke(plan, ["--problem", problem, "--json", "--host-cores", "1", "--host-request-cpu-ms", "6"])
    doc = json.loads(r.output)
    assert r.exit_code == 2 and not doc["feasible"] and "host" in doc["notes"][0]
    r = CliRunner().invoke(plan, ["--problem", problem, "--host-cores", "two"])
    assert r.exit_code == 2 and "--host-cores" in r.output
