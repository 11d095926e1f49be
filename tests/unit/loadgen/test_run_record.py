"""slipstream.loadgen.run_record: a run's report folder is read back as it was written, and the StageConfigs in
force are read with the control topic's one epoch rule."""
from dataclasses import replace

from slipstream.streams.control_rules import current_records

from slipstream.loadgen.run_record import RunRecord
from tests.control_records import result


def cfg(stage, epoch, **kw):
    return {"stage": stage, "epoch": epoch, "replicas": 1, **kw}


def test_a_stale_stage_config_read_late_is_left_out_and_a_scaling_action_passes():
    history = [(30, cfg("a", 2)), (10, cfg("a", 1)), (40, cfg("a", 1)), (50, {"stage": "a", "replicas": 3}),
               (45, cfg("b", 0))]
    assert [(t, r.get("epoch")) for t, r in current_records(history)] == [
        (10, 1), (30, 2), (45, 0), (50, None)]


def test_results_control_and_plan_round_trip(tmp_path, planned):
    _problem, plan = planned
    run = RunRecord(tmp_path)
    assert run.control() == [] and run.plan_doc() is None and not run.has_results()
    r1, r2 = result(request_id="r1", created_ns=100, output=b"x"), result(request_id="r2", created_ns=50)
    run.write_results([r1, r2])
    run.write_control([(60, cfg("a", 1)), (40, cfg("a", 0)), (70, cfg("a", 0))])
    run.write_plan(plan)
    assert run.results() == [replace(r1, output=r2.output), r2]  # no payload
    assert '"output"' not in (tmp_path / "results.jsonl").read_text()
    assert run.start_ns() == 50
    assert run.control()[0] == (60, cfg("a", 1))
    assert run.plan().to_dict() == plan.to_dict() == run.plan_doc()
    assert run.configs_in_force() == [(40, cfg("a", 0)), (60, cfg("a", 1))]  # epoch 0 at 70 is stale
