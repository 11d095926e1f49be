"""What a plan can serve (slipstream.planner.capacity), computed by hand on a two-stage chain."""
from __future__ import annotations

import pytest

from slipstream.planner.capacity import capacity_qps, stage_budgets_ms, stage_capacity
from slipstream.planner.plan import Assignment, evaluate
from slipstream.planner.problem import parse_problem

DOC = {"slo_ms": 400, "arrival": {"rate_qps": 20}, "hop_ms": 10.0,
       "hardware": {"cpu": {"cost_per_hour": 0.1}},
       "stages": [{"name": "a", "variants": [{"name": "va", "latency_ms": {"cpu": {"1": 10, "4": 40}}}]},
                  {"name": "b", "variants": [{"name": "vb", "latency_ms": {"cpu": {"1": 30, "4": 100}}}]}],
       "edges": [{"from": "a", "to": "b", "fanout": 2.0}]}


def plan_of(problem, ra=1, rb=3):
    return evaluate(problem, "milp", {"a": (Assignment("va", "cpu", 1, ra, 1.0, 0.0),),
                                      "b": (Assignment("vb", "cpu", 4, rb, 1.0, 50.0),)})


def test_budgets_split_the_slo_less_transits_by_each_stages_no_queue_latency():
    problem = parse_problem(DOC)
    budgets = stage_budgets_ms(problem, plan_of(problem))
    # path budget 400 - 3 hops x 10 ms = 370; latencies a: 10 + 0, b: 100 + 50
    assert budgets["a"] == pytest.approx(370 * 10 / 160)
    assert budgets["b"] == pytest.approx(370 * 150 / 160)
    assert sum(budgets.values()) == pytest.approx(370)


def test_stage_capacity_is_the_batching_service_curve_in_pipeline_requests():
    problem = parse_problem(DOC)
    plan = plan_of(problem)
    caps = stage_capacity(problem, plan, (0.2, 1.0))
    b = caps["b"]
    # 3 replicas x 4 / 0.1 s = 120 items/s, 2 items per request: 60 req/s
    assert b.rate_qps == pytest.approx(60.0)
    # window 0.2 s: floor((200 + 346.875 - 50) / 100) = 4 batches of 4 per replica: 48 items, 24 requests
    assert b.window_qps[0] == pytest.approx(24 / 0.2)
    assert b.window_qps[1] == pytest.approx(3 * 4 * 12 / 2 / 1.0)  # floor(1296.875 / 100) = 12
    assert caps["a"].rate_qps == pytest.approx(100.0)
    assert capacity_qps(problem, plan) == (pytest.approx(60.0), "b")


def test_a_stage_that_cannot_serve_a_lone_item_within_its_share_has_no_window_capacity():
    """SLO 150: the path budget 120 ms is below its no-queue latency (160 ms), so every share is below its
    stage's l(b) + timeout (a: 7.5 < 10, b: 112.5 < 150): no delay bound at any rate."""
    problem = parse_problem({**DOC, "slo_ms": 150})
    caps = stage_capacity(problem, plan_of(problem), (0.2, 1.0))
    assert caps["b"].window_qps == () and caps["b"].rate_qps == pytest.approx(60.0)
    assert caps["a"].window_qps == ()
    assert stage_capacity(problem := parse_problem({**DOC, "slo_ms": 190}), plan_of(problem), (0.2,))["b"].window_qps
