"""The load-shedding rule and the gateway's outcome tracker: pure, every clock passed in."""
from dataclasses import replace

import numpy as np
import pytest

from slipstream.gateway.shedding import MAX_RETRY_S, Load, Outcomes, decide, service_rate
from slipstream.streams.control_io import planned_capacity_qps
from tests.control_records import handoff as typed_handoff

MS = 1_000_000
LOAD = Load(in_flight=0, observed_qps=100.0, planned_qps=None, base_ms=20.0)


def test_an_idle_pipeline_admits_with_its_unloaded_latency():
    d = decide(LOAD, budget_ms=400)
    assert d.admit and d.predicted_ms == pytest.approx(20.0)


def test_requests_ahead_that_push_the_prediction_past_the_budget_shed_with_the_time_to_drain():
    # 100 req/s, 20 ms unloaded: 38 ahead -> 400 ms fits exactly; 138 ahead -> 1400 ms, 100 too many
    assert decide(replace(LOAD, in_flight=38), 400).admit
    d = decide(replace(LOAD, in_flight=138), 400)
    assert not d.admit and d.predicted_ms == pytest.approx(1400.0)
    assert d.retry_after_s == 1 and "138 in flight" in d.reason
    assert decide(replace(LOAD, in_flight=538), 400).retry_after_s == 5  # 500 too many at 100/s


def test_without_a_service_rate_everything_is_admitted():
    d = decide(replace(LOAD, in_flight=10_000, observed_qps=None), 400)
    assert d.admit and d.predicted_ms is None


def test_a_budget_below_the_unloaded_latency_is_admitted_for_the_pipeline_to_drop():
    d = decide(replace(LOAD, in_flight=500), budget_ms=5)
    assert d.admit and "below the unloaded latency" in d.reason


def test_the_lower_of_observed_and_planned_rates_is_used():
    assert service_rate(replace(LOAD, planned_qps=40.0)) == 40.0
    assert service_rate(replace(LOAD, observed_qps=None, planned_qps=40.0)) == 40.0
    assert not decide(replace(LOAD, in_flight=30, planned_qps=40.0), 400).admit  # 20 + 750 ms
    assert decide(replace(LOAD, in_flight=30), 400).admit  # 20 + 300 ms


def test_planned_capacity_is_the_slowest_stage_with_the_replicas_in_force():
    handoff = typed_handoff(stages=[{"stage": "a", "replicas": 1, "mu_qps": 100.0, "visit_ratio": 1.0},
                                    {"stage": "b", "replicas": 2, "mu_qps": 50.0, "visit_ratio": 2.0}])
    assert planned_capacity_qps(handoff, {}) == pytest.approx(50.0)  # b: 50 * 2 / 2
    assert planned_capacity_qps(handoff, {"b": 4}) == pytest.approx(100.0)  # the tuner scaled b
    assert planned_capacity_qps(None, {"b": 4}) is None


def test_planned_capacity_is_bounded_by_what_the_host_serves_at_the_shares_in_force():
    rungs = [{"variant": "big", "rate_qps": 50.0, "cpu_ms_per_item": 40.0},
             {"variant": "small", "rate_qps": 100.0, "cpu_ms_per_item": 10.0}]
    handoff = typed_handoff(stages=[{"stage": "a", "replicas": 8, "mu_qps": 100.0, "visit_ratio": 1.0},
                                    {"stage": "b", "replicas": 8, "mu_qps": 50.0, "visit_ratio": 1.0}],
                            capacity=[{"stage": "a", "cpu_ms_per_item": 5.0},
                                      {"stage": "b", "cpu_ms_per_item": 40.0, "ladder": rungs}],
                            host={"free_cores": 1.5, "request_cpu_ms": 5.0})
    # replicas alone: 400 (b, 8 x 50); the host: 1.5 cores / (5 + 5 + 40 ms) = 30 qps
    assert planned_capacity_qps(handoff, {}) == pytest.approx(30.0)
    # the tuner moved b to the cheaper variant: 1.5 / (5 + 5 + 10 ms) = 75 qps
    assert planned_capacity_qps(handoff, {}, {"b": {"small": 1.0}}) == pytest.approx(75.0)
    assert planned_capacity_qps(replace(handoff, host=None), {}) == pytest.approx(400.0)  # no host: no bound


def test_outcomes_count_busy_throughput_and_the_unloaded_latency():
    o = Outcomes(window_s=5.0, min_answers=5)
    t = 0
    for i in range(10):  # one at a time, 20 ms each, 80 ms idle between
        o.admitted(t)
        o.left(t + 20 * MS, answered=True, done_latency_ms=20.0 + i)
        t += 100 * MS
    assert o.in_flight == 0
    assert o.observed_qps(t) == pytest.approx(50.0)  # 10 answers in 200 ms busy
    assert o.base_ms() == pytest.approx(20.45)  # 5th percentile of 20..29
    o.admitted(t)
    o.left(t + 1, answered=False)  # given up on: no answer counted
    assert o.observed_qps(t + 1) == pytest.approx(10 / 0.200000001)


def test_outcomes_forget_what_left_the_window():
    o = Outcomes(window_s=1.0, min_answers=2)
    for i in range(3):
        o.admitted(i * MS)
        o.left(i * MS + MS, answered=True, done_latency_ms=1.0)
    assert o.observed_qps(10 * MS) is not None
    assert o.observed_qps(5_000 * MS) is None  # the window is empty again
    o.admitted(6_000 * MS)
    assert o.in_flight == 1 and o.busy_s(6_500 * MS) == pytest.approx(0.5)


def test_the_unloaded_latency_is_numpys_percentile_of_the_last_kept_answers():
    rng = np.random.default_rng(3)
    o = Outcomes(window_s=5.0, min_answers=5, base_pct=5.0, keep=64)
    lat = rng.lognormal(2.0, 0.7, 300)
    for i, ms in enumerate(lat):  # the window slides: the oldest leave the percentile as new ones come
        o.admitted(i * MS)
        o.left(i * MS + 1, answered=True, done_latency_ms=float(ms))
        if i >= 4:
            assert o.base_ms() == pytest.approx(np.percentile(lat[max(0, i - 63):i + 1], 5.0))


def test_busy_time_kept_as_a_sum_is_the_overlap_of_every_busy_interval_with_the_window():
    rng = np.random.default_rng(5)
    o = Outcomes(window_s=1.0)
    spans, t, since = [], 0, None
    for _ in range(400):  # requests come and go at random; busy while any is in flight
        t += int(rng.integers(1, 40)) * MS
        if o.in_flight and rng.random() < 0.5:
            o.left(t, answered=True)
            if o.in_flight == 0:
                spans.append((since, t))
        else:
            if o.in_flight == 0:
                since = t
            o.admitted(t)
        now = t + int(rng.integers(0, 5)) * MS
        cut = now - 1000 * MS
        want = sum(max(0, e - max(s, cut)) for s, e in spans + ([(since, now)] if o.in_flight else []))
        assert o.busy_s(now) == pytest.approx(want / 1e9, abs=1e-9)


def test_a_ladder_stage_serves_at_the_shares_in_force():
    handoff = typed_handoff(stages=[{"stage": "c", "replicas": 1, "mu_qps": 20.0, "visit_ratio": 1.0}],
                            capacity=[{"stage": "c", "ladder": [{"variant": "big", "rate_qps": 20.0},
                                                                {"variant": "small", "rate_qps": 60.0}]}])
    assert planned_capacity_qps(handoff, {"c": 2}) == pytest.approx(40.0)  # the plan's variant
    assert planned_capacity_qps(handoff, {"c": 2}, {"c": {"big": 1.0, "small": 0.0}}) == pytest.approx(40.0)
    # half the items on a variant three times as fast: 2 / (0.5/20 + 0.5/60) = 60
    assert planned_capacity_qps(handoff, {"c": 2}, {"c": {"big": 0.5, "small": 0.5}}) == pytest.approx(60.0)
    assert planned_capacity_qps(handoff, {"c": 2}, {"c": {"small": 1.0}}) == pytest.approx(120.0)
    # a share on a variant the ladder does not rate: the plan's figure
    assert planned_capacity_qps(handoff, {"c": 2}, {"c": {"other": 1.0}}) == pytest.approx(40.0)


@pytest.mark.parametrize("mu_qps", [5e-324, 1e-300, 1e-9, 1e-6])
def test_a_vanishing_planned_rate_sheds_with_numbers_not_an_overflow(mu_qps):
    handoff = typed_handoff(stages=[{"stage": "s", "replicas": 1, "mu_qps": mu_qps, "visit_ratio": 1.0}])
    load = replace(LOAD, in_flight=3, observed_qps=None, planned_qps=planned_capacity_qps(handoff, {}))
    d = decide(load, 400)
    assert not d.admit and 1 <= d.retry_after_s <= MAX_RETRY_S
    assert d.predicted_ms is None or (np.isfinite(d.predicted_ms) and d.predicted_ms > 400)


@pytest.mark.parametrize("rate", [float("nan"), float("inf"), -1.0, 0.0])
def test_a_rate_that_is_no_finite_positive_number_is_no_evidence(rate):
    assert service_rate(replace(LOAD, observed_qps=None, planned_qps=rate)) is None
    assert service_rate(replace(LOAD, planned_qps=rate)) == 100.0


def test_extreme_valid_loads_give_bounded_answers():
    huge = decide(replace(LOAD, in_flight=10**9, observed_qps=1e9, base_ms=0.0), 1e6)  # 1 s of work: admitted
    assert huge.admit
    slow = decide(replace(LOAD, in_flight=10**9, observed_qps=1e-6), 400)
    assert not slow.admit and slow.retry_after_s == MAX_RETRY_S and np.isfinite(slow.predicted_ms)
