"""Admission by deadline (``slipstream.streams.shedding``): expired requests, and the source gate that lets
through what the bottleneck serves in time and sheds the rest."""
import pytest

from slipstream.streams.shedding import SourceGate, expired

MS = 1_000_000
S = 1_000_000_000


def test_a_request_is_expired_only_when_it_cannot_finish_even_served_at_once():
    assert expired("a", deadline_ns=100 * MS, now_ns=90 * MS, serve_ns=10 * MS) is None  # just in time
    why = expired("a", deadline_ns=100 * MS, now_ns=91 * MS, serve_ns=10 * MS)
    assert why.startswith("deadline: expired before a") and "1.0 ms late" in why


def offer(gate: SourceGate, rate_qps: float, seconds: float, budget_ms: float, serve_ns: int = 0):
    """Requests at an even ``rate_qps`` for ``seconds``, each with ``budget_ms`` to its deadline:
    (admitted, reasons of the refused)."""
    admitted, refused = 0, []
    for k in range(int(rate_qps * seconds)):
        now = int(k / rate_qps * S)
        why = gate.judge(now + int(budget_ms * MS), now, serve_ns)
        if why is None:
            admitted += 1
        else:
            refused.append(why)
    return admitted, refused


@pytest.mark.parametrize("offered", [1.5, 2.0, 3.0])
def test_the_source_gate_lets_through_what_the_bottleneck_serves_and_sheds_the_rest(offered):
    gate = SourceGate("resize", rate_qps=50.0)
    admitted, refused = offer(gate, 50.0 * offered, seconds=20, budget_ms=400)
    # 20 s at 50 req/s, plus the 400 ms the budget lets queue ahead of the bottleneck
    assert 50 * 20 <= admitted <= 50 * 20.4 + 1
    assert refused and all(why.startswith("shed: ") for why in refused)


def test_below_the_bottleneck_nothing_is_shed():
    assert offer(SourceGate("resize", rate_qps=50.0), 45.0, seconds=20, budget_ms=400)[1] == []


def test_with_no_capacity_known_only_expired_requests_are_dropped():
    gate = SourceGate("resize")
    assert offer(gate, 500.0, seconds=2, budget_ms=400)[1] == []
    assert gate.judge(deadline_ns=5 * MS, now_ns=10 * MS, serve_ns=0).startswith("deadline:")


def test_a_shed_request_is_not_counted_ahead_of_later_ones():
    gate = SourceGate("resize", rate_qps=10.0)
    for _ in range(4):  # fills 400 ms at 10 req/s
        assert gate.judge(400 * MS, 0, 0) is None
    assert gate.judge(400 * MS, 0, 0).startswith("shed")
    assert gate.level == 4
    assert gate.judge(int(500 * MS), int(100 * MS), 0) is None  # 100 ms later one has drained
