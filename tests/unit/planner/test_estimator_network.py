"""Kafka between the agents in the estimator: a transit on every hop, sampled transits, fetches."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from slipstream.planner.estimator import Network, Transit, simulate
from slipstream.planner.plan import Assignment
from slipstream.planner.problem import parse_problem

from planner_builders import one_stage, single_plan


def two_stage(fanout: float):
    return parse_problem({
        "slo_ms": 10_000, "arrival": {"rate_qps": 5, "sim_seconds": 10},
        "hardware": {"cpu": {"cost_per_hour": 1}},
        "stages": [{"name": "d", "variants": [{"name": "v", "latency_ms": {"cpu": {"1": 10}}}]},
                   {"name": "c", "variants": [{"name": "w", "latency_ms": {"cpu": {"1": 4}}}]}],
        "edges": [{"from": "d", "to": "c", "fanout": fanout}]})


TWO = single_plan({"d": [Assignment("v", "cpu", 1, 1, 1.0, 0.0)], "c": [Assignment("w", "cpu", 1, 1, 1.0, 0.0)]})


def test_a_constant_transit_on_every_hop():
    # client -> d -> c -> results: 3 hops of 2 ms; hop_ms says the same as a constant Network
    res = simulate(replace(two_stage(1.0), arrivals_s=np.array([0.0]), hop_ms=2.0), TWO)
    assert res.latency_ms[0] == pytest.approx(2 + 10 + 2 + 4 + 2)
    assert res.stage_ms[0] == pytest.approx([12.0, 6.0])  # residence counts the transit in
    net = simulate(replace(two_stage(1.0), arrivals_s=np.array([0.0]),
                           network=Network.every_hop(Transit.constant(2.0))), TWO)
    assert net.latency_ms[0] == res.latency_ms[0]


def test_split_requests_go_through_the_join():
    # 3 fragments of 4 ms one after another, each to the join (+1 ms), then the result (+5 ms)
    net = Network(ingress=Transit.constant(2.0), between=Transit.constant(3.0), to_join=Transit.constant(1.0),
                  to_results=Transit.constant(5.0))
    res = simulate(replace(two_stage(3.0), arrivals_s=np.array([0.0]), network=net), TWO)
    assert res.latency_ms[0] == pytest.approx(2 + 10 + 3 + 12 + 1 + 5)
    whole = simulate(replace(two_stage(1.0), arrivals_s=np.array([0.0]), network=net), TWO)  # never split: no join
    assert whole.latency_ms[0] == pytest.approx(2 + 10 + 3 + 4 + 5)


def test_sampled_transit_adds_its_mean_per_hop():
    # one request a second through two stages (no queueing): 3 hops of shift 1 + Exp(mean 2) ms
    transit = Transit.shifted_exponential(1.0, 2.0)
    arr = np.arange(4000) * 1.0
    res = simulate(replace(two_stage(1.0), arrivals_s=arr, network=Network.every_hop(transit), seed=5), TWO)
    extra = res.latency_ms - 14.0
    assert extra.min() >= 3.0
    assert float(extra.mean()) == pytest.approx(3 * transit.mean_ms, rel=0.05)


def test_transit_distributions_sample_what_they_say():
    rng = np.random.default_rng(1)
    assert Transit.constant(2.5).sample(rng, 3) == pytest.approx([2.5] * 3)
    se = Transit.shifted_exponential(1.0, 2.0).sample(rng, 200_000)
    assert se.min() >= 1.0 and se.mean() == pytest.approx(3.0, rel=0.02)
    ln = Transit.lognormal(median_ms=2.0, sigma=0.5, shift_ms=1.0)
    draws = ln.sample(rng, 200_000)
    assert np.median(draws) == pytest.approx(3.0, rel=0.02) and draws.mean() == pytest.approx(ln.mean_ms, rel=0.02)
    emp = Transit.empirical([1.0, 2.0, 7.0]).sample(rng, 1000)
    assert set(np.unique(emp)) == {1.0, 2.0, 7.0}
    fit = Transit.fit_shifted_exponential(se)
    assert fit.shift_ms == pytest.approx(1.0, abs=0.01) and fit.scale_ms == pytest.approx(2.0, rel=0.02)


def test_fetch_cadence_delays_each_consumer_to_its_next_fetch():
    # one stage: the worker's consumer and the client's see an item at their next fetch (every 10 ms,
    # each from its own phase)
    p = one_stage({1: 5.0}, slo_ms=10_000)
    plan = single_plan({"a": [Assignment("v", "cpu", 1, 1, 1.0, 0.0)]})
    arr = np.arange(3000) * 0.1003  # arrivals spread evenly over the fetch cycle
    res = simulate(replace(p, arrivals_s=arr, network=Network(fetch_interval_ms=10.0), seed=2), plan)
    seen = res.stage_ms[:, 0] - 5.0  # worker: arrival -> its next fetch
    assert seen.min() >= 0 and seen.max() < 10.0 and float(seen.mean()) == pytest.approx(5.0, rel=0.05)
    fetched_ms = np.round(arr * 1000 + seen, 6) % 10.0
    assert np.ptp(fetched_ms) < 1e-3 or np.ptp((fetched_ms + 5) % 10) < 1e-3  # one cadence, one phase
    # the client: every result is ready 5 ms after a worker fetch, so it waits the same for its own
    client = res.latency_ms - res.stage_ms[:, 0]
    assert np.ptp(client) < 1e-6 and 0 <= client[0] < 10.0
