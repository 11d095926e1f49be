"""A live run says so when workers it did not start served its requests."""
from __future__ import annotations

from slipstream.loadgen.live.run import foreign_hops, started_ids, warn_foreign
from slipstream.loadgen.run_record import RunRecord
from slipstream.schemas.records import InferenceResult
from tests.control_records import result


def _result(*workers: str) -> InferenceResult:
    return result(created_ns=1, hops=[{"stage": f"s{i}", "worker": w} for i, w in enumerate(workers)])


def test_hops_by_processes_the_run_did_not_start_are_counted_per_process():
    results = [_result("vm-10/0", "vm-11/1"), _result("vm-10/1", "vm-99/0"), _result("vm-99/0", "other-11/0")]
    assert foreign_hops(results, {"vm-10", "vm-11"}) == {"vm-99": 2, "other-11": 1}
    assert foreign_hops(results, {"vm-10", "vm-11", "vm-99", "other-11"}) == {}


def test_the_warning_is_printed_into_the_summary(tmp_path):
    RunRecord(tmp_path).write_results([_result("vm-10/0", "vm-99/0"), _result("vm-10/0", "vm-11/0")])
    (tmp_path / "summary.txt").write_text("SLO attainment 99.00%\n")
    assert warn_foreign(tmp_path, {"vm-10", "vm-11", "vm-99"}) == ""
    text = warn_foreign(tmp_path, {"vm-10", "vm-11"})
    assert text.startswith("WARNING: 1 of 4 hops were served by workers this run did not start (vm-99 x1)")
    assert (tmp_path / "summary.txt").read_text().splitlines()[-1] == text


def test_the_join_workers_hops_are_the_runs_own():
    """The join worker names itself join-pid in its hops, a stage worker host-pid."""
    import socket

    from slipstream.streams.procs import join_id, worker_id
    ours = started_ids([("resize", 10), ("join", 11)])
    assert ours == {f"{socket.gethostname()}-10", "join-11"} == {worker_id(10), join_id(11)}
    assert foreign_hops([_result(f"{worker_id(10)}/0", "join-11/0")], ours) == {}
