"""Replica changes in the estimator: in-worker (no pause for running servers) against rebalance."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from slipstream.planner.estimator import ReplicaChange, SimOptions, simulate
from slipstream.planner.plan import Assignment
from slipstream.streams.arrivals import poisson_arrivals

from planner_builders import one_stage, single_plan

D_MS = 10.0


def run(arr, replicas: int, schedule=(), max_batch: int = 1, activation_s: float = 5.0, **options):
    p = one_stage({1: D_MS, 4: 16.0}, slo_ms=1e6)
    p = replace(p, arrivals_s=np.asarray(arr, dtype=float), activation_s=activation_s)
    plan = single_plan({"a": [Assignment("v", "cpu", max_batch, replicas, 1.0, 0.0)]})
    return simulate(p, plan, SimOptions(schedule=schedule, drop_late=False, **options))


def test_in_worker_replicas_start_serving_activation_after_the_change():
    # 2 -> 3 replicas at 1.0 s, 0.5 s activation. A burst of 6 at 1.2 s finds 2 replicas, one at
    # 1.6 s finds 3; the request at 1.0 s is served at once (nothing pauses)
    burst1, burst2 = [1.2] * 6, [1.6] * 6
    res = run([1.0, *burst1, *burst2], 2, [ReplicaChange(1.0, "a", 3)], activation_s=0.5)
    assert res.latency_ms[0] == pytest.approx(D_MS)
    assert sorted(res.latency_ms[1:7]) == pytest.approx([10, 10, 20, 20, 30, 30])
    assert sorted(res.latency_ms[7:]) == pytest.approx([10, 10, 10, 20, 20, 20])


def test_an_added_replica_serves_its_own_activation_after_the_change():
    # as above with a loaded spare replica: the third serves 0.1 s after the change (not the 0.5 s of a
    # load, which the rebalance pause keeps), so the burst at 1.2 s already finds 3
    burst1 = [1.2] * 6
    res = run([1.0, *burst1], 2, [ReplicaChange(1.0, "a", 3)], activation_s=0.5, in_worker_activation_s=0.1)
    assert sorted(res.latency_ms[1:7]) == pytest.approx([10, 10, 10, 20, 20, 20])
    with pytest.raises(ValueError, match="in_worker_activation_s"):
        SimOptions(in_worker_activation_s=-1.0)


def test_in_worker_scale_up_delays_nobody():
    # Poisson at rho 0.75 on 2 replicas; a third joins at 20 s (activation 2 s). Every request is
    # served no later than without the change, exactly as before until the new one is up, and
    # sooner on average after
    arr = poisson_arrivals(150.0, 60.0, 3)
    change = [ReplicaChange(20.0, "a", 3)]
    base, scaled = run(arr, 2, activation_s=2.0), run(arr, 2, change, activation_s=2.0)
    before = arr + base.latency_ms / 1000 < 22.0  # done before the new replica is up
    assert np.array_equal(base.latency_ms[before], scaled.latency_ms[before])
    assert np.all(scaled.latency_ms <= base.latency_ms + 1e-9)
    assert scaled.latency_ms[~before].mean() < 0.8 * base.latency_ms[~before].mean()


def test_rebalance_pauses_every_replica_and_new_ones_wait_for_activation():
    # 1 -> 2 replicas at 0.5 s, pause 0.3 s, activation 1.0 s. Items go round-robin over 4 partitions,
    # the range assignor gives partitions 0, 1 to the old replica and 2, 3 to the new one
    arr = [0.0, 0.6, 0.65, 0.9, 2.0]  # partitions 0, 1, 2, 3, 0; the new replica serves 2, then 3
    res = run(arr, 1, [ReplicaChange(0.5, "a", 2)], scaling="rebalance", pause_s=0.3, activation_s=1.0)
    assert res.latency_ms == pytest.approx([10.0, 210.0, 860.0, 620.0, 10.0])
    same = run(arr, 1, [ReplicaChange(0.5, "a", 2)], activation_s=1.0)  # in-worker: the old one serves on
    assert same.latency_ms == pytest.approx([10.0] * 5)


def test_rebalance_scale_up_delays_by_about_the_pause():
    arr = poisson_arrivals(150.0, 60.0, 3)
    change = [ReplicaChange(20.0, "a", 3)]
    options = dict(scaling="rebalance", pause_s=0.5, activation_s=0.5)
    base, scaled = run(arr, 2, **options), run(arr, 2, change, **options)
    done = arr + base.latency_ms / 1000 < 20.0  # done before the change
    assert np.array_equal(base.latency_ms[done], scaled.latency_ms[done])
    first = np.flatnonzero(arr >= 20.0)[0]  # the first request after the change waits out the pause
    assert scaled.latency_ms[first] - base.latency_ms[first] == pytest.approx(500.0 - 1000 * (arr[first] - 20), abs=3 * D_MS)
    assert float(np.max(scaled.latency_ms - base.latency_ms)) == pytest.approx(500.0, abs=3 * D_MS)


def test_removed_replica_finishes_its_window_and_stops():
    # 2 replicas, max batch 4, 5 ms timeout, SLO 45 ms, l = 10, 11, 30, 44 ms for 1..4. Four requests
    # at 0 keep the first replica busy until 44 ms; b, c, d, e (1-4 ms) fill the second one's window
    # at 4 ms, which runs b, c, d (44 ms would miss b's deadline, 30 ms does not) and defers e to
    # 34 ms. The second replica is removed at 5 ms: it still finishes its window (e done at 44 ms),
    # then stops: of 8 requests at 1 s the one left runs 4, the other 4 would end too late (dropped)
    p = one_stage({1: 10.0, 2: 11.0, 3: 30.0, 4: 44.0}, slo_ms=45.0)
    plan = single_plan({"a": [Assignment("v", "cpu", 4, 2, 1.0, 5.0)]})
    arr = np.array([0.0] * 4 + [0.001, 0.002, 0.003, 0.004] + [1.0] * 8)
    res = simulate(replace(p, arrivals_s=arr), plan, SimOptions(schedule=[ReplicaChange(0.005, "a", 1)]))
    assert res.latency_ms[:8] == pytest.approx([44.0] * 4 + [33.0, 32.0, 31.0, 40.0])
    assert res.latency_ms[8:12] == pytest.approx([44.0] * 4) and res.dropped[12:].all()


def test_scale_down_then_up_before_activation():
    # 1 -> 2 -> 1 -> 2: the replica removed before it was ever up never serves; the last one is up at
    # 0.1 + 0.5 s
    sched = [ReplicaChange(0.0, "a", 2), ReplicaChange(0.05, "a", 1), ReplicaChange(0.1, "a", 2)]
    res = run([0.7, 0.7], 1, sched, activation_s=0.5)
    assert res.latency_ms == pytest.approx([10.0, 10.0])
    res = run([0.55, 0.55], 1, sched, activation_s=0.5)
    assert sorted(res.latency_ms) == pytest.approx([10.0, 20.0])


@pytest.mark.parametrize("scaling", ["in-worker", "rebalance"])
def test_a_replans_batching_applies_to_windows_taken_after_it(scaling):
    # one request every 500 ms: with max batch 4 and a 100 ms timeout each waits out the timeout; a
    # re-plan at 5 s to max batch 1 (no timeout) on another variant serves each at once, in its 4 ms
    from slipstream.planner.estimator import BatchingChange
    from slipstream.planner.problem import parse_problem

    doc = {"slo_ms": 1e6, "arrival": {"rate_qps": 2.0, "sim_seconds": 10.0}, "hardware": {"cpu": {"cost_per_hour": 1.0}},
           "stages": [{"name": "a", "variants": [{"name": "v", "accuracy": 0.9, "latency_ms": {"cpu": {"1": 10, "4": 16}}},
                                                 {"name": "w", "accuracy": 0.8, "latency_ms": {"cpu": {"1": 4}}}]}]}
    plan = single_plan({"a": [Assignment("v", "cpu", 4, 1, 1.0, 100.0)]})
    arr = np.arange(0.0, 10.0, 0.5)
    change = BatchingChange(5.0, "a", "w", "cpu", 1, 0.0)
    p = replace(parse_problem(doc), arrivals_s=arr, hop_ms=0.0)
    res = simulate(p, plan, SimOptions(schedule=[change], drop_late=False, scaling=scaling))
    assert res.latency_ms[arr < 5.0] == pytest.approx(110.0)  # the timeout, then l(1) of v
    assert res.latency_ms[arr >= 5.0] == pytest.approx(4.0)
    with pytest.raises(ValueError, match="'b'"):
        simulate(p, plan, SimOptions(schedule=[BatchingChange(5.0, "b", "w", "cpu", 1, 0.0)]))
