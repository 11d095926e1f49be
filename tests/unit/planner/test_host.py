"""The planner knows its host: the cores, what the co-located processes take of them (declared in the
problem or measured), and no mode plans more than they give (slipstream.planner.cores, milp's host constraint,
the estimator check, the fallback)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from slipstream.planner import milp
from slipstream.planner import problem as problem_module
from slipstream.planner.cores import cores_busy, host_excess, host_qps, served_qps
from slipstream.planner.fallback import highest_capacity
from slipstream.planner.modes import MODES, check, make_planner
from slipstream.planner.plan import evaluate
from slipstream.planner.problem import ProblemError, declared_host, fit_colocated, parse_problem
from slipstream.planner.sim.params import HostModel
from slipstream.streams.arrivals import poisson_arrivals

SOLVERS = ("highs", "cbc")

# image-classify as measured on a 2-core host: resize 2.4 ms an item, lite0 10.5 on one thread and
# 7.5 on two (15 ms of CPU), the broker, load generator and gateway 11 ms of CPU a request
IMAGE = {"slo_ms": 400, "arrival": {"rate_qps": 70, "sim_seconds": 20}, "hop_ms": 6.0,
         "max_replicas": 4, "max_stage_replicas": 2,
         "hardware": {"cpu-1": {"cost_per_hour": 0.05}, "cpu-2": {"cost_per_hour": 0.10, "threads": 2}},
         "host": {"cores": 2, "request_cpu_ms": 11.0},
         "stages": [{"name": "resize", "variants": [{"name": "resize", "latency_ms": {
                        "cpu-1": {"1": 2.4, "2": 4.8, "4": 9.6}, "cpu-2": {"1": 2.3, "2": 4.2, "4": 7.9}}}]},
                    {"name": "classify", "variants": [{"name": "lite0", "accuracy": 0.751, "latency_ms": {
                        "cpu-1": {"1": 10.5, "2": 21, "4": 42}, "cpu-2": {"1": 7.5, "2": 14.5, "4": 27}}}]}],
         "edges": [{"from": "resize", "to": "classify"}]}
PER_REQUEST_MS = 2.4 + 10.5 + 11.0  # the least CPU a request takes on this host: 1-thread hardware
HOST_QPS = 2000.0 / PER_REQUEST_MS  # 83.7 qps


def image(rate: float, **host) -> "problem_module.Problem":
    doc = dict(IMAGE, arrival={"rate_qps": rate, "sim_seconds": 20})
    if host:
        doc["host"] = host
    return parse_problem(doc)


def test_a_declared_host_is_read_and_auto_is_this_process_s_cgroup_limit(monkeypatch):
    assert image(70).host == HostModel(2.0, 0.0, 11.0)
    assert parse_problem({k: v for k, v in IMAGE.items() if k != "host"}).host is None  # none declared
    monkeypatch.setattr(problem_module, "cgroup_cpu_limit", lambda: 1.5)
    assert image(70, request_cpu_ms=3.0).host == HostModel(1.5, 0.0, 3.0)  # cores "auto" by default
    monkeypatch.setattr(problem_module, "cgroup_cpu_limit", lambda: None)
    monkeypatch.setattr(problem_module.os, "cpu_count", lambda: 6)
    assert declared_host().cores == 6.0


@pytest.mark.parametrize("host, names", [({"request_cpu_ms": -1}, "host.request_cpu_ms"),
                                         ({"cores": 0}, "host.cores"),
                                         ({"cores": 2, "background_cores": 2}, "host: expected background_cores"),
                                         ({"cpus": 2}, "host.cpus")])
def test_a_bad_host_is_refused_by_field(host, names):
    with pytest.raises(ProblemError, match=names):
        image(70, **host)


@pytest.mark.parametrize("host, fits", [(HostModel(2.0), True), (HostModel(1.5), False),
                                        (HostModel(2.0, 0.5), True), (HostModel(2.0, 1.0), False), (None, True)])
def test_hardware_fits_the_host_s_whole_cores_its_background_leaves(host, fits):
    p = replace(image(70), host=host)
    assert p.fits_host("cpu-2") is fits and p.fits_host("cpu-1")


def test_the_co_located_load_is_fitted_from_measured_busy_cores():
    rates = [10.0, 40.0, 80.0, 120.0]
    assert fit_colocated(rates, [0.2 + r * 0.011 for r in rates]) == pytest.approx((0.2, 11.0))
    assert fit_colocated([50.0], [0.55]) == pytest.approx((0.0, 11.0))  # one rate: all of it per request
    fixed, per = fit_colocated(rates, [r * 0.011 - 0.05 for r in rates])  # never below zero
    assert fixed == 0.0 and per == pytest.approx(10.4, abs=0.2)
    with pytest.raises(ValueError, match="as many"):
        fit_colocated([1.0, 2.0], [0.1])


def test_what_a_plan_asks_of_the_host_and_what_the_host_serves():
    p = image(70)
    one = evaluate(p, "t", {"resize": (milp.assignment_for(_config(p, "resize", "cpu-1", 1), 1),),
                            "classify": (milp.assignment_for(_config(p, "classify", "cpu-1", 1), 2),)})
    models, others = cores_busy(p, one, 70.0)
    assert models == pytest.approx(70 * (2.4 + 10.5) / 1000) and others == pytest.approx(0.77)
    assert host_qps(p, one) == pytest.approx(HOST_QPS)
    assert host_excess(p, one) == "" and "at 100.0 qps" in host_excess(p, one, 100.0)
    assert served_qps(replace(p, rate_qps=150.0), one) == (pytest.approx(HOST_QPS), "host")  # not its 190 qps
    assert served_qps(replace(p, host=None), one)[1] == "classify"


def _config(p, stage, hw, batch):
    return next(c for c in milp.stage_configs(p, stage) if (c.hardware, c.batch) == (hw, batch))


@pytest.mark.parametrize("solver", SOLVERS)
def test_milp_spends_less_cpu_an_item_when_the_host_binds(solver):
    # one replica of either keeps up with 60 qps: "slow" is cheaper, 10 ms of CPU an item (0.6 cores),
    # "fast" 6 ms (0.36 cores); 1 core, 7 ms a request of it for the co-located processes: 0.58 left
    doc = dict(IMAGE, arrival={"rate_qps": 60}, edges=[],
               hardware={"slow": {"cost_per_hour": 0.05}, "fast": {"cost_per_hour": 0.06}},
               stages=[{"name": "classify", "variants": [{"name": "lite0", "latency_ms": {
                   "slow": {"1": 10.0}, "fast": {"1": 6.0}}}]}])
    p = parse_problem(dict(doc, host=None))
    assert milp.solve(p, milp.MilpOptions(solver=solver)).stages[0].primary.hardware == "slow"
    on = replace(p, host=HostModel(1.0, 0.0, 7.0))
    plan = milp.solve(on, milp.MilpOptions(solver=solver))
    assert plan.feasible and plan.stages[0].primary.hardware == "fast" and host_excess(on, plan) == ""
    over = milp.solve(replace(p, host=HostModel(1.0, 0.0, 12.0)), milp.MilpOptions(solver=solver))
    assert not over.feasible and over.reason.startswith("host: at 60.0 qps")  # 0.28 cores left < 0.36


@pytest.mark.parametrize("solver", SOLVERS)
def test_milp_plans_no_hardware_wider_than_the_host(solver):
    p = image(20)
    assert any(a.hardware == "cpu-2" for sp in milp.solve(replace(p, host=None, slo_ms=11),
                                                           milp.MilpOptions(solver=solver)).stages
               for a in sp.assignments)  # without a host the 2-thread lite0 is the one that fits 11 ms
    narrow = replace(p, host=HostModel(1.0), slo_ms=11)
    plan = milp.solve(narrow, milp.MilpOptions(solver=solver))
    assert not plan.feasible and "fastest configs take 12.9 ms" in plan.reason  # cpu-1's
    assert all(a.hardware == "cpu-1" for sp in milp.solve(replace(p, host=HostModel(1.0)),
                                                          milp.MilpOptions(solver=solver)).stages for a in sp.assignments)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("rate", [70.0, 150.0])
def test_no_mode_plans_more_than_the_host_s_cores(mode, rate):
    p = replace(image(rate), arrivals_s=poisson_arrivals(rate, 10.0, 1))
    plan = make_planner(mode, time_limit_s=5.0).plan(p)
    assert plan.stages and all(p.fits_host(a.hardware) for sp in plan.stages for a in sp.assignments)
    if plan.feasible:
        assert host_excess(p, plan) == ""
    else:  # the highest-capacity plan: what the cores give, its replicas sized to it
        assert plan.capacity_qps <= host_qps(p, plan) + 1e-6
        assert plan.capacity_qps == pytest.approx(served_qps(p, plan)[0])
    if rate == 150.0:
        assert not plan.feasible and plan.capacity_qps == pytest.approx(HOST_QPS)


def test_the_fallback_takes_the_hardware_that_serves_most_on_the_host():
    p = image(150)
    free = highest_capacity(replace(p, host=None), "milp", False)
    assert free["classify"][0].hardware == "cpu-2"  # off a host: the fastest replica
    on = highest_capacity(p, "milp", False)
    assert on["classify"][0].hardware == "cpu-1"  # on it: 10.5 ms of CPU an item, not 2 x 7.5
    assert [on[s][0].replicas for s in ("resize", "classify")] == [1, 2]  # 150 qps, as the 2 cores run
    one = highest_capacity(replace(p, host=HostModel(1.0)), "milp", False)
    assert [(one[s][0].hardware, one[s][0].replicas) for s in ("resize", "classify")] == [("cpu-1", 1)] * 2


def test_the_check_refuses_a_plan_the_host_cannot_run_at_its_rate():
    # planned for 100 qps (a forecast peak) on a sample of 20 qps, which the estimator replays fine
    p = replace(image(100), arrivals_s=poisson_arrivals(20.0, 10.0, 1))
    plan = evaluate(p, "t", {"resize": (milp.assignment_for(_config(p, "resize", "cpu-1", 1), 1),),
                             "classify": (milp.assignment_for(_config(p, "classify", "cpu-1", 1), 2),)})
    assert check(replace(p, host=None), plan).feasible
    checked = check(p, plan)
    assert not checked.feasible and checked.reason.startswith("host: at 100.0 qps")


def test_a_window_s_own_work_is_counted_once_per_stage_a_request_visits():
    # 11 ms a request in all at windows of one: 5 per request, 3 per window of each of the two stages.
    # The planner's host bound and the source gate's drain rate (the hand-off the workers read) count
    # the same CPU a request: the knee's, where every window holds one request.
    from slipstream.loadgen.simulate import published_handoff
    from slipstream.streams.control_io import host_capacity_qps

    split = image(70, cores=2, request_cpu_ms=5.0, window_cpu_ms=3.0)
    assert split.host == HostModel(2.0, 0.0, 5.0, 3.0)
    assert split.windows_per_request() == 2.0 and split.host.per_request_ms(2.0) == 11.0
    one = evaluate(split, "t", {"resize": (milp.assignment_for(_config(split, "resize", "cpu-1", 1), 1),),
                                "classify": (milp.assignment_for(_config(split, "classify", "cpu-1", 1), 2),)})
    assert host_qps(split, one) == pytest.approx(HOST_QPS)  # as with 11 ms a request
    assert cores_busy(split, one, 70.0)[1] == pytest.approx(0.77)
    assert host_capacity_qps(published_handoff(split, one)) == pytest.approx(HOST_QPS)
    with pytest.raises(ProblemError, match="host.window_cpu_ms"):
        image(70, window_cpu_ms=-1.0)
