"""`slipstream estimate`: the estimator on a finished live run, with the calibration in force or one
fitted on given runs; fitting on a run makes the estimate of it agree with what it measured."""
from __future__ import annotations

import json

from click.testing import CliRunner

from slipstream.loadgen.render import write_report
from slipstream.loadgen.report import summarize
from slipstream.loadgen.run_record import RunRecord
from slipstream.planner.plan import Assignment, Plan, StagePlan
from slipstream.planner.profiles import BatchPoint, Profile, ProfileStore
from slipstream.commands.estimate import estimate_cmd
from tests.control_records import result

MS = 1_000_000
PIPE = """name: one
slo_ms: 300
hardware: {cpu: {kind: cpu, threads: 1, cost_per_hour: 0.05}}
stages:
  - name: a
    variants: [{name: va, model: m, accuracy: 0.7}]
"""


def finished_run(tmp_path):
    """A run whose batches took 5x the profiled 4 ms, 30 ms after a 10 ms transit, one request every 100 ms."""
    results = []
    for i in range(300):
        t0 = 10**12 + i * 100 * MS
        hop = {"stage": "a", "variant": "va", "batch_size": 1, "enqueued_ns": t0, "received_ns": t0 + 10 * MS,
               "started_ns": t0 + 10 * MS, "finished_ns": t0 + 30 * MS, "worker": "w/0"}
        results.append(result(request_id=f"r{i}", pipeline="one", created_ns=t0, deadline_ns=t0 + 300 * MS,
                              finished_ns=t0 + 30 * MS, hops=[hop]))
    report = tmp_path / "run"
    write_report(summarize(results, slo_ms=300, pipeline="one", label="one milp"), report, plots=False)
    RunRecord(report).write_results(results)
    plan = Plan("milp", (StagePlan("a", (Assignment("va", "cpu", 1, 1),)),), feasible=True, rate_qps=10.0)
    (report / "plan.json").write_text(json.dumps(plan.to_dict()))
    return report


def ratio(output: str, column: int = 3) -> float:
    """est/meas of the last report line (column 8: drawn/meas, the pace drawn from the calibration)."""
    return float(output.strip().splitlines()[-1].split()[column])


def test_estimate_replays_a_finished_run_and_a_fit_on_it_agrees(tmp_path):
    ProfileStore(tmp_path / "p").save(Profile("va", "cpu", {1: BatchPoint(3, 4), 4: BatchPoint(8, 10)}))
    (tmp_path / "one.yaml").write_text(PIPE)
    report = finished_run(tmp_path)
    args = ["--report", str(report), "--pipeline", str(tmp_path / "one.yaml"), "--profiles", str(tmp_path / "p")]
    bare = CliRunner().invoke(estimate_cmd, args)
    assert bare.exit_code == 0, bare.output
    assert "calibration: none" in bare.output and ratio(bare.output, 8) < 0.6  # 4 ms + a 6 ms hop against 30 ms
    # replayed at the run's own pace the batches take the 20 ms they took (5x the profile): 20 + a 6 ms hop
    assert abs(ratio(bare.output) - 26 / 30) < 0.02
    fitted = CliRunner().invoke(estimate_cmd, [*args, "--fit", str(report)])
    assert fitted.exit_code == 0, fitted.output
    assert "not stored" in fitted.output and abs(ratio(fitted.output) - 1.0) < 0.05
    assert not (tmp_path / "p" / "calibration").exists()  # --fit stores nothing


def test_estimate_replays_the_batching_the_run_saw_on_the_control_topic(tmp_path):
    ProfileStore(tmp_path / "p").save(Profile("va", "cpu", {1: BatchPoint(3, 4), 4: BatchPoint(8, 10)}))
    (tmp_path / "one.yaml").write_text(PIPE)
    report = finished_run(tmp_path)
    # the plan file says batches of 4 with a 100 ms timeout; what ran (epoch 2, from before the start) was batches of 1
    plan = Plan("milp", (StagePlan("a", (Assignment("va", "cpu", 4, 1, 1.0, 100.0),)),), feasible=True, rate_qps=10.0)
    (report / "plan.json").write_text(json.dumps(plan.to_dict()))
    args = ["--report", str(report), "--pipeline", str(tmp_path / "one.yaml"), "--profiles", str(tmp_path / "p"),
            "--fit", str(report)]
    waits = CliRunner().invoke(estimate_cmd, args)
    assert ratio(waits.output) > 3  # every request waits out the 100 ms timeout
    ran = {"stage": "a", "epoch": 2, "variant": "va", "hardware": "cpu", "replicas": 1, "max_batch": 1,
           "batch_timeout_ms": 0.0}
    (report / "control.jsonl").write_text(json.dumps({"at_ns": 10**12 - 10**9, "record": ran}) + "\n")
    seen = CliRunner().invoke(estimate_cmd, args)
    assert seen.exit_code == 0, seen.output
    assert abs(ratio(seen.output) - 1.0) < 0.05


def test_estimate_charges_the_per_request_cpu_the_runs_declared(tmp_path):
    from slipstream.loadgen.live.calibration import fit_report
    from slipstream.streams.spec import load_pipeline

    ProfileStore(tmp_path / "p").save(Profile("va", "cpu", {1: BatchPoint(3, 4), 4: BatchPoint(8, 10)}))
    (tmp_path / "one.yaml").write_text(PIPE)
    report = finished_run(tmp_path)
    doc = fit_report(report, load_pipeline(tmp_path / "one.yaml"), tmp_path / "p", store=False)
    ProfileStore(tmp_path / "p").calibrations.save({**doc, "host": {"cores": 1.0, "free_cores": 1.0,
                                                                    "mean_concurrency": 1.0}})
    args = ["--report", str(report), "--pipeline", str(tmp_path / "one.yaml"), "--profiles", str(tmp_path / "p")]
    alone, shared = (CliRunner().invoke(estimate_cmd, [*args, "--request-cpu-ms", ms]) for ms in ("0", "60"))
    assert alone.exit_code == 0 and shared.exit_code == 0, alone.output + shared.output
    # each request's 60 ms of other work shares the one core with its 20 ms batch
    assert ratio(shared.output) > ratio(alone.output) + 0.5
