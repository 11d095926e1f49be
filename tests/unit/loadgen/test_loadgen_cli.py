"""The CLI commands that need no broker: `loadgen show`, `loadgen report`, `simulate` and `compare` on a
synthetic problem."""
import json

import numpy as np
from click.testing import CliRunner

from slipstream.commands.loadgen import loadgen
from slipstream.commands.simulate import compare, simulate


def test_show_prints_stats_and_writes_arrivals(tmp_path):
    out = tmp_path / "arr.txt"
    r = CliRunner().invoke(loadgen, ["show", "--trace", "poisson:rate=30,duration=100", "--seed", "2",
                                     "--out", str(out)])
    assert r.exit_code == 0, r.output
    stats = json.loads(r.output[: r.output.rindex("}") + 1])
    assert abs(stats["mean_qps"] - 30) < 2 and abs(stats["cv2"] - 1) < 0.15
    assert len(np.loadtxt(out)) == stats["requests"]
    bad = CliRunner().invoke(loadgen, ["show", "--trace", "poisson:rate=30"])
    assert bad.exit_code == 2 and "needs duration=" in bad.output


def test_report_from_results_jsonl(tmp_path):
    lines = [{"request_id": f"r-{i}", "status": "done", "created_ns": i * 10**7,
              "finished_ns": i * 10**7 + (i + 1) * 10**6, "deadline_ns": i * 10**7 + 50 * 10**6,
              "hops": []} for i in range(100)]
    f = tmp_path / "results.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    r = CliRunner().invoke(loadgen, ["report", str(f), "--slo-ms", "50", "--sent", "120",
                                     "--out", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    assert "SLO attainment 41.67%" in r.output  # 50 of 120 within 50 ms
    assert (tmp_path / "rep" / "latency.png").stat().st_size > 0


def problem_file(tmp_path, slo_ms: float = 300):
    problem = {"slo_ms": slo_ms, "hardware": {"cpu": {"cost_per_hour": 0.1}},
               "stages": [{"name": "a", "variants": [{"name": "v", "accuracy": 0.9,
                                                      "latency_ms": {"cpu": {"1": 8, "4": 20}}}]}],
               "arrival": {"rate_qps": 50}}
    pf = tmp_path / "p.json"
    pf.write_text(json.dumps(problem))
    return pf


def test_simulate_a_problem_file(tmp_path):
    pf = problem_file(tmp_path)
    r = CliRunner().invoke(simulate, ["--problem", str(pf), "--trace", "step:rates=50/400,at=40,duration=80",
                                      "--report", str(tmp_path / "sim")])
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "sim" / "summary.json").read_text())
    assert doc["source"] == "simulate" and doc["requests"] > 10000
    assert json.loads((tmp_path / "sim" / "plan.json").read_text())["mode"] == "milp"
    # the tuner reacted to the step from 50 to 400 qps, beyond what one replica serves (4 / 20 ms)
    assert max(doc["series"]["replicas"]["a"]) > doc["series"]["replicas"]["a"][0]


def test_compare_exits_non_zero_when_a_mode_fails_and_says_why(tmp_path):
    args = ["--problem", str(problem_file(tmp_path)), "--trace", "poisson:rate=50,duration=20"]
    ok = CliRunner().invoke(compare, [*args, "--modes", "cg-peak,milp"])
    assert ok.exit_code == 0, ok.output
    bad = CliRunner().invoke(compare, [*args, "--modes", "cg-peak,nope"])
    assert bad.exit_code == 1, bad.output
    assert "nope              FAILED: ValueError: mode: expected one of" in bad.output
    assert "mode(s) failed:\nnope: ValueError" in bad.output


def test_compare_runs_a_mode_with_no_feasible_plan_on_its_highest_capacity_plan(tmp_path):
    """No mode refuses (slipstream.planner.fallback): an SLO no batch meets is served, and missed, not 'unavailable'."""
    args = ["--problem", str(problem_file(tmp_path, slo_ms=2)), "--trace", "poisson:rate=50,duration=20"]
    r = CliRunner().invoke(compare, [*args, "--modes", "milp,cg-peak"])
    assert r.exit_code == 0, r.output
    assert "unavailable" not in r.output
    rows = {line.split()[0]: line.split() for line in r.output.splitlines()[1:]}
    assert set(rows) == {"milp", "cg-peak"} and rows["milp"][4] == "0.00%"


def test_demo_without_a_step_in_the_trace_asks_for_plan_seconds(monkeypatch):
    """--plan-seconds defaults to a step trace's first step; for any other trace it must be given."""
    from slipstream.commands.demo import demo

    monkeypatch.setenv("SLIPSTREAM_BOOTSTRAP", "127.0.0.1:1")  # named, so the demo starts no broker
    r = CliRunner().invoke(demo, ["--trace", "gamma:rate=5,cv2=4,duration=30"])
    assert r.exit_code == 2 and "--plan-seconds" in r.output and "no step" in r.output
