"""The fault suite's pure parts: the case table, the recovery time and a case's outcome."""
from __future__ import annotations

import numpy as np
import pytest

from slipstream.loadgen import chaos
from tests.control_records import result

S = chaos.NS_PER_S


def test_the_suite_kills_every_stage_the_join_and_each_service_freezes_one_and_kills_a_broker():
    cases = chaos.fault_cases(["a", "b"], has_join=True, brokers=1, freeze_stage="a", freeze_s=15, broker_down_s=5)
    assert [(c.action, c.target) for c in cases] == [
        ("none", ""), ("kill", "a"), ("kill", "b"), ("kill", "join"), ("kill", "tuner"), ("kill", "planner"),
        ("freeze", "a"), ("broker", "")]
    assert cases[6].hold_s == 15 and cases[7].hold_s == 5
    three = chaos.fault_cases(["a"], has_join=False, brokers=3, freeze_stage="a", freeze_s=15, broker_down_s=5)
    assert [c.action for c in three] == ["none", "kill", "kill", "kill", "freeze", "node"]
    assert "1 broker of 3" in three[-1].name
    assert [c.target for c in chaos.select(cases, ["join", "baseline"])] == ["", "join"]
    with pytest.raises(ValueError, match="freeze stage"):
        chaos.fault_cases(["a"], has_join=False, brokers=1, freeze_stage="x", freeze_s=1, broker_down_s=1)


def steady(rate: float, seconds: float, latency_s: float, stall: tuple[float, float] | None = None):
    """Requests every 1/rate s answered latency_s later; those due in a stall window wait for its end."""
    sent = np.arange(0, seconds, 1 / rate)
    answered = sent + latency_s
    if stall:
        a, b = stall
        hit = (answered >= a) & (answered < b)
        answered[hit] = b + (answered[hit] - a) * 0.2  # the backlog drains 5x faster than it built up
    return (sent * S).astype(np.int64), answered * S


def test_no_dip_means_no_recovery_time():
    sent, answered = steady(10, 30, 0.1)
    rec = chaos.recovery_time_s(sent, answered, 10 * S)
    assert rec.seconds == 0.0 and rec.baseline in (1, 2)  # one in flight (two at a tie)


def test_recovery_is_when_the_backlog_is_back_to_its_pre_fault_level():
    sent, answered = steady(10, 40, 0.1, stall=(10, 15))
    rec = chaos.recovery_time_s(sent, answered, 10 * S)
    # stalled 5 s (50 requests backed up), drained at 5x: caught up ~1.25 s after the stall ends
    assert 5.5 < rec.seconds < 7.0, rec
    assert not rec.after_last_send


def test_a_request_never_answered_means_not_recovered():
    sent, answered = steady(10, 30, 0.1, stall=(10, 12))
    answered[150:] = np.inf
    assert chaos.recovery_time_s(sent, answered, 10 * S).seconds is None


def test_catching_up_only_after_the_last_send_is_flagged():
    sent, answered = steady(10, 20, 0.1, stall=(15, 25))
    rec = chaos.recovery_time_s(sent, answered, 15 * S)
    assert rec.seconds is not None and rec.after_last_send


def test_outcome_counts_missing_duplicates_and_conflicts_from_every_record():
    sent = {f"r-{i}": i * S // 10 for i in range(30)}

    def rec(i, status="done", dt=0.05):
        return sent[f"r-{i}"] + int(dt * S), result(request_id=f"r-{i}", status=status, created_ns=sent[f"r-{i}"],
                                                    finished_ns=sent[f"r-{i}"] + int(dt * S))

    records = [rec(i) for i in range(28)] + [rec(3), rec(4, "dropped"), rec(5, dt=1.0)]
    out = chaos.outcome(chaos.FaultCase("x", chaos.NONE), records, sent, None, slo_ms=500)
    assert (out.requests, out.missing, out.duplicates, out.conflicting) == (30, 2, 3, 1)
    assert out.recovery.seconds == 0.0
    assert out.attainment == pytest.approx(28 / 30)  # the first result counts; 28, 29 missing
    row = chaos.format_table([out]).splitlines()[-1]
    assert row.startswith("| x | 30 | 2 | 3 | 1 | 0.0 s | 93.3 %")


def test_window_attainment_skips_thin_windows():
    created = np.array([0, 1, 2, 3, 4, 5], dtype=np.int64) * S // 2
    ok = np.array([1, 1, 0, 0, 1, 1], dtype=bool)
    t, att = chaos.window_attainment(created, ok, 0, 3 * S, window_s=1.0, min_requests=2)
    assert list(t) == [0.0, 1.0, 2.0] and list(att) == [1.0, 0.0, 1.0]


def test_the_table_and_the_backlog_plots_are_drawn(tmp_path):
    sent_ns, answered = steady(10, 20, 0.1, stall=(5, 8))
    sent = {f"r-{i}": int(t) for i, t in enumerate(sent_ns)}
    records = [(int(a), result(request_id=f"r-{i}", created_ns=int(s), finished_ns=int(a)))
               for i, (s, a) in enumerate(zip(sent_ns, answered))]
    case = chaos.FaultCase("kill -9 x worker", chaos.KILL, "x")
    out = chaos.outcome(case, records, sent, 5 * S, slo_ms=500)
    assert out.missing == out.duplicates == 0 and out.recovery.seconds > 3
    assert out.worst_attainment < out.attainment < 1
    chaos.plot_table([out], tmp_path / "t.png", "title")
    rows = [chaos.case_row(*x) for x in records]  # as the case files keep them
    chaos.plot_backlogs([{"name": case.name, "sent": sent, "results": rows, "fault_ns": 5 * S},
                         {"name": "baseline", "sent": sent, "results": rows, "fault_ns": None}],
                        tmp_path / "b.png")
    assert (tmp_path / "t.png").stat().st_size > 1000 and (tmp_path / "b.png").stat().st_size > 1000


def test_the_cluster_fault_kills_the_busiest_node_the_controller_or_a_given_one():
    from slipstream.loadgen.faults.chaos_run import ChaosOptions, check_node, pick_node

    assert pick_node("busiest", 3, 1) == 3
    assert pick_node("controller", 3, 1) == 1
    assert pick_node("controller", 3, None) == 3  # the controller not found in the logs: the busiest
    assert pick_node("2", 3, 1) == 2
    assert ChaosOptions("p.yaml", brokers=3, broker_node="controller").broker_node == "controller"
    for bad in ("0", "leader", "-1"):
        with pytest.raises(ValueError, match="broker node"):
            ChaosOptions("p.yaml", brokers=3, broker_node=bad)
    check_node("6", 6)  # a controller-only node of 3 brokers and 3 controllers
    for bad in ("7", "0", "leader"):
        with pytest.raises(ValueError, match="broker node"):
            check_node(bad, 6)
