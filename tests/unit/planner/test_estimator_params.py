"""The estimator's parameters refuse bad values, and the message names the value."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from slipstream.planner.estimator import HostModel, Network, ReplicaChange, ServiceTime, SimOptions, Transit, simulate
from slipstream.planner.plan import Assignment

from planner_builders import one_stage, single_plan


@pytest.mark.parametrize("make, names", [
    (lambda: Transit("gamma"), "'gamma'"),
    (lambda: Transit.constant(-1.5), "-1.5"),
    (lambda: Transit.shifted_exponential(1.0, float("nan")), "nan"),
    (lambda: Transit.lognormal(median_ms=0.0, sigma=1.0), "0.0"),
    (lambda: Transit("constant", samples_ms=(1.0,)), "1 samples"),
    (lambda: Transit.empirical([1.0, -3.0]), "-3.0"),
    (lambda: Transit.fit_shifted_exponential([]), "none"),
    (lambda: Network(fetch_interval_ms=-5.0), "-5.0"),
    (lambda: Network(between=2.0), "2.0"),
    (lambda: HostModel(cores=0.0), "0.0"),
    (lambda: HostModel(cores=2.0, background_cores=2.5), "2.5"),
    (lambda: HostModel(cores=2.0, background_cores=-1.0), "-1.0"),
    (lambda: ServiceTime("uniform"), "'uniform'"),
    (lambda: ServiceTime("lognormal"), "cv 0.0"),
    (lambda: ServiceTime("exponential", cv=0.3), "cv 0.3"),
    (lambda: ServiceTime("lognormal", 0.3, cv_by_ms=((4.0, 0.4), (0.0, 0.1))), "(0.0, 0.1"),
    (lambda: ServiceTime("lognormal", 0.3, cv_by_ms=((40.0, 0.4), (4.0, 0.1))), "ascending"),
    (lambda: ReplicaChange(1.0, "a", 0), "0"),
    (lambda: ReplicaChange(1.0, "a", 2, index=-1), "-1"),
])
def test_bad_parameters_are_refused_by_name(make, names):
    with pytest.raises(ValueError, match=names.replace("(", r"\(").replace(".", r"\.")):
        make()


P = one_stage({1: 1.0})
PLAN = single_plan({"a": [Assignment("v", "cpu", 1, 1, 1.0, 0.0)]})


@pytest.mark.parametrize("options, names", [
    ({"scaling": "elastic"}, "'elastic'"),
    ({"scaling": {"b": "in-worker"}}, "'b'"),
    ({"scaling": {"a": "pods"}}, "'pods'"),
    ({"method": "magic"}, "'magic'"),
    ({"fanout_dist": "binomial"}, "'binomial'"),
    ({"pause_s": -1.0}, "-1.0"),
    ({"schedule": [ReplicaChange(1.0, "zz", 2)]}, "'zz'"),
])
def test_bad_simulate_options_are_refused_by_name(options, names):
    with pytest.raises(ValueError, match=names.replace(".", r"\.")):
        simulate(replace(P, arrivals_s=np.array([0.0])), PLAN, SimOptions(**options))


def test_a_negative_activation_time_is_refused_by_name():
    with pytest.raises(ValueError, match="-2.0"):
        simulate(replace(P, arrivals_s=np.array([0.0]), activation_s=-2.0), PLAN)


def test_host_rate_is_processor_sharing():
    h = HostModel(cores=2.0, background_cores=0.5)
    assert [h.rate(k) for k in (0, 1, 2, 3)] == pytest.approx([1.0, 1.0, 0.75, 0.5])


def test_drops_predict_with_the_workers_own_predictor_learning_from_the_runs():
    # 10 ms batches, 25 ms SLO, one request every 50 ms; the machine runs 3x slow in the second second.
    # The worker's predictor (RecentLatency) learns the 30 ms from the first slow run: from the next
    # request on it predicts 30 ms > 25 and drops, as the worker would; the first slow one is late.
    problem = one_stage({1: 10.0}, slo_ms=25.0)
    plan = single_plan({"a": [Assignment("v", "cpu", 1, 1)]})
    arrivals = np.arange(0.0, 2.0, 0.05)
    res = simulate(replace(problem, arrivals_s=arrivals, service=ServiceTime(timeline=(1.0, 3.0)), hop_ms=0.0), plan)
    first = arrivals < 1.0
    assert not res.dropped[first].any() and np.allclose(res.latency_ms[first], 10.0)
    late = np.flatnonzero(~first)
    assert res.latency_ms[late[0]] == pytest.approx(30.0) and not res.dropped[late[0]]  # predicted 10 ms: ran
    assert res.dropped[late[1:]].all()
    assert np.all(res.drop_info_ns[late[1:], 2] == 30 * 1_000_000)  # the learnt batch-1 latency


def test_a_timeline_paces_each_window_as_the_run_measured_and_each_variant_its_own():
    problem = one_stage({1: 10.0}, slo_ms=1000.0)
    plan = single_plan({"a": [Assignment("v", "cpu", 1, 1)]})
    arrivals = np.arange(0.0, 4.0, 0.25)
    tl = (1.0, 2.0, 0.5)  # windows past its end are drawn from ``slowdown`` (none: 1)
    res = simulate(replace(problem, arrivals_s=arrivals, service=ServiceTime(timeline=tl), hop_ms=0.0), plan)
    assert res.latency_ms.tolist() == pytest.approx([10.0] * 4 + [20.0] * 4 + [5.0] * 4 + [10.0] * 4)
    own = ServiceTime(timelines=(("v@cpu", tl),), timeline=(3.0,))
    assert own.for_variant("v@cpu").timeline == tl and own.for_variant("w@cpu").timeline == (3.0,)
    res = simulate(replace(problem, arrivals_s=arrivals, service=own, hop_ms=0.0), plan)
    assert res.latency_ms.tolist() == pytest.approx([10.0] * 4 + [20.0] * 4 + [5.0] * 4 + [10.0] * 4)
    with pytest.raises(ValueError, match=r"timelines\['v@cpu'\]"):
        ServiceTime(timelines=(("v@cpu", (1.0, -1.0)),))


def test_slowdown_paces_every_batch_of_a_window():
    problem = one_stage({1: 10.0}, rate=2.0, seconds=30.0)
    plan = single_plan({"a": [Assignment("v", "cpu", 1, 2)]})
    base = simulate(replace(problem, seed=3), plan)
    slow = simulate(replace(problem, seed=3, service=ServiceTime(slowdown=(3.0,))), plan)
    assert slow.p50_ms == pytest.approx(base.p50_ms + 20.0, abs=0.01)  # every batch 3x its 10 ms
    mixed = simulate(replace(problem, seed=3, service=ServiceTime(slowdown=(1.0, 3.0), slowdown_window_s=1.0)), plan)
    lat = mixed.latency_ms[~np.isnan(mixed.latency_ms)]
    assert np.any(np.isclose(lat, base.p50_ms, atol=0.5)) and np.any(lat > base.p50_ms + 19.0)
    with pytest.raises(ValueError, match="slowdown_window_s"):
        ServiceTime(slowdown=(1.0,), slowdown_window_s=0.0)


@pytest.mark.parametrize("method", ["auto", "events"])
def test_the_workers_own_time_per_batch_holds_the_replica_before_the_model_runs(method):
    service = ServiceTime(dispatch=Transit.constant(3.0))
    one = replace(one_stage({1: 10.0}), arrivals_s=np.array([0.0, 0.0, 1.0]), hop_ms=0.0)
    sim = simulate(replace(one, service=service), PLAN, SimOptions(method=method))
    assert np.sort(sim.latency_ms).tolist() == pytest.approx([13.0, 13.0, 26.0])  # the second waits 13 ms
    plain = simulate(one, PLAN, SimOptions(method=method))
    assert np.sort(plain.latency_ms).tolist() == pytest.approx([10.0, 10.0, 20.0])


def test_the_spread_by_batch_length_interpolates_between_its_points_and_is_flat_beyond():
    svc = ServiceTime("lognormal", 0.3, cv_by_ms=((4.0, 0.4), (100.0, 0.1)))
    assert svc.cv_at(4.0) == pytest.approx(0.4) and svc.cv_at(100.0) == pytest.approx(0.1)
    assert svc.cv_at(20.0) == pytest.approx(0.2)  # halfway in log-log
    assert svc.cv_at(1.0) == pytest.approx(0.4) and svc.cv_at(1000.0) == pytest.approx(0.1)
    assert ServiceTime("lognormal", 0.3).cv_at(1000.0) == 0.3
    f = svc.factors(np.random.default_rng(0), 40_000, np.repeat([4.0, 100.0], 20_000))
    assert np.std(f[:20_000]) == pytest.approx(0.4, rel=0.05) and np.std(f[20_000:]) == pytest.approx(0.1, rel=0.05)
    assert np.mean(f) == pytest.approx(1.0, abs=0.01)


def test_a_long_batch_runs_with_the_small_spread_of_long_batches():
    plan = single_plan({"a": [Assignment("v", "cpu", 1, 1)]})
    svc = ServiceTime("lognormal", 0.5, cv_by_ms=((4.0, 0.5), (100.0, 0.05)))
    spread = {}
    for ms in (4.0, 100.0):
        problem = one_stage({1: ms}, slo_ms=100 * ms)
        lat = simulate(replace(problem, arrivals_s=np.arange(0.0, 400.0, 2.0), service=svc, hop_ms=0.0, seed=4),
                       plan).latency_ms
        spread[ms] = np.std(lat) / np.mean(lat)
    assert spread[4.0] == pytest.approx(0.5, rel=0.2) and spread[100.0] == pytest.approx(0.05, rel=0.2)


def test_a_variant_with_its_own_spread_runs_and_is_predicted_with_it():
    # the pooled spread is large, variant v's own (a calibration measured it) small: v's batches are
    # drawn, and the agents predict v's batches, with v's; another variant keeps the pooled one
    plan = single_plan({"a": [Assignment("v", "cpu", 1, 1)]})
    problem = one_stage({1: 50.0}, slo_ms=5000.0)
    pooled = ServiceTime("lognormal", 0.6)
    own = ServiceTime("lognormal", 0.6, by_variant=(("v@cpu", ((50.0, 0.05),)),))
    assert own.for_variant("v@cpu").cv_at(50.0) == pytest.approx(0.05)
    assert own.for_variant("w@cpu") is own and own.for_variant("v@gpu") is own
    arrivals = np.arange(0.0, 80.0, 0.4)  # far apart: residence is the batch's run; 10 runs within the
    # predictor's horizon (slipstream.streams.latency.PREDICT_HORIZON_S)
    spread = {}
    for name, svc in (("pooled", pooled), ("own", own)):
        lat = simulate(replace(problem, arrivals_s=arrivals, service=svc, hop_ms=0.0, seed=4), plan).latency_ms
        spread[name] = np.std(lat) / np.mean(lat)
    assert spread["pooled"] == pytest.approx(0.6, rel=0.2) and spread["own"] == pytest.approx(0.05, rel=0.2)
    # a deadline 1.35x the profile: the worker's predictor (the slowest of its last 10 runs) stays
    # under it with v's own spread and goes over it with the pooled one, so only that one drops (about
    # a third: after PREDICT_IDLE_S of drops the predictor forgets the slow runs and tries again)
    tight = one_stage({1: 50.0}, slo_ms=50.0 * 1.35)
    assert simulate(replace(tight, arrivals_s=arrivals, service=own, hop_ms=0.0, seed=4), plan).drop_rate == 0
    assert simulate(replace(tight, arrivals_s=arrivals, service=pooled, hop_ms=0.0, seed=4), plan).drop_rate > 0.25
    with pytest.raises(ValueError, match="by_variant"):
        ServiceTime("deterministic", by_variant=(("v@cpu", ((50.0, 0.05),)),))
    with pytest.raises(ValueError, match=r"by_variant\['v@cpu'\].*ascending"):
        ServiceTime("lognormal", 0.3, by_variant=(("v@cpu", ((40.0, 0.4), (4.0, 0.1))),))
