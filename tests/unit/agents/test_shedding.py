"""Admission by deadline (``agents.shedding``): expired requests, and the source gate that lets
through what the pipeline serves in time, judged by what became of the requests it let through."""
import pytest

from agents.shedding import SourceGate, expired

MS = 1_000_000
S = 1_000_000_000


def test_a_request_is_expired_only_when_it_cannot_finish_even_served_at_once():
    assert expired("a", deadline_ns=100 * MS, now_ns=90 * MS, serve_ns=10 * MS) is None  # just in time
    why = expired("a", deadline_ns=100 * MS, now_ns=91 * MS, serve_ns=10 * MS)
    assert why.startswith("deadline: expired before a") and "1.0 ms late" in why


def run(gate: SourceGate, offered_qps: float, served_qps: float, seconds: float, budget_ms: float = 400,
        latency_ms: float = 50):
    """Requests at an even ``offered_qps`` for ``seconds``; the pipeline serves those let through in
    order at ``served_qps``, each answered ``done`` on the results topic when served. (let through,
    answered within budget, reasons of the refused)."""
    admitted, in_time, refused, queue, free_at = 0, 0, [], [], 0.0
    for k in range(int(offered_qps * seconds)):
        now = k / offered_qps
        while queue and max(free_at, queue[0][1]) + 1 / served_qps <= now:  # serve what finished by now
            rid, arrived = queue.pop(0)
            free_at = max(free_at, arrived) + 1 / served_qps
            gate.answered(rid, True, latency_ms, int(free_at * S))
            in_time += free_at - arrived <= budget_ms / 1000
        why = gate.judge(f"r{k}", int((now + budget_ms / 1000) * S), int(now * S), 0)
        if why is None:
            admitted += 1
            queue.append((f"r{k}", now))
        else:
            refused.append(why)
    return admitted, in_time, refused


@pytest.mark.parametrize("offered", [1.5, 2.0, 3.0])
def test_past_capacity_the_source_lets_through_what_is_served_in_time_and_sheds_the_rest(offered):
    gate = SourceGate("resize")
    gate.planned_qps = 200.0  # the plan believes in far more than the pipeline serves
    admitted, in_time, refused = run(gate, 50.0 * offered, 50.0, seconds=30)
    assert 50 * 30 * 0.9 <= admitted <= 50 * 30 * 1.05  # about what the pipeline serves
    assert in_time >= 0.95 * (admitted - 50 * 0.4)  # and nearly all of it in time (the last 0.4 s in flight)
    assert refused and all(why.startswith("shed: ") for why in refused)


def test_below_capacity_nothing_is_shed():
    gate = SourceGate("resize")
    gate.planned_qps = 200.0
    assert run(gate, 40.0, 50.0, seconds=30)[2] == []


def test_with_no_rate_known_only_expired_requests_are_dropped():
    gate = SourceGate("resize")  # no plan, no answers yet
    for k in range(500):
        assert gate.judge(f"r{k}", 400 * MS, 0, 0) is None
    assert gate.judge("late", deadline_ns=5 * MS, now_ns=10 * MS, serve_ns=0).startswith("deadline:")


def test_the_plans_capacity_bounds_what_is_let_through_before_any_answer():
    gate = SourceGate("resize")
    gate.planned_qps = 10.0
    let = [gate.judge(f"r{k}", 400 * MS, 0, 0) is None for k in range(10)]
    assert let == [True] * 5 + [False] * 5  # the fifth waits 400 ms behind four at 10 req/s


def test_an_unanswered_request_leaves_in_flight_after_its_deadline_and_grace():
    gate = SourceGate("resize", grace_ms=100)
    gate.planned_qps = 10.0
    for k in range(5):
        assert gate.judge(f"r{k}", 400 * MS, 0, 0) is None
    assert gate.judge("r9", 400 * MS, 0, 0) is not None and gate.outcomes.in_flight == 5
    assert gate.judge("r5", 900 * MS, 501 * MS, 0) is None  # r0-r4 given up: room again
    assert gate.outcomes.in_flight == 1 and list(gate.pending) == ["r5"]
    gate.answered("r5", False, 10.0, 600 * MS)  # a drop downstream frees its place
    gate.answered("r5", True, 10.0, 600 * MS)  # a second answer is no news
    assert gate.outcomes.in_flight == 0
