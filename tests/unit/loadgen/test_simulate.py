"""Simulated runs feed the same report: estimator output -> result records -> Summary, and comparisons."""
import numpy as np
import pytest

from slipstream.loadgen.compare import ModeNotApplicable, compare_runs, failures, format_comparison, parse_mode
from slipstream.loadgen.report import summarize
from slipstream.loadgen.simulate import config_events, results_from_sim, simulate_run
from slipstream.planner.estimator import ReplicaChange
from tests.control_records import result
from tests.paths import RESEARCH_DATA

DATA = RESEARCH_DATA / "UMass-LIDS+Loki"


def test_simulated_results_have_the_result_fields(planned):
    problem, plan = planned
    run = simulate_run(problem, plan, problem.arrivals_s, seed=1, start_ns=10**18)
    s, sim = run.summary, run.sim
    assert s.source == "simulate" and s.requests == sim.requests
    assert s.attainment == pytest.approx(sim.attainment)  # the report agrees with the estimator
    assert s.dropped == int(sim.dropped.sum())
    for q, p in ((50, s.latency.p50_ms), (99, s.latency.p99_ms)):  # one definition: drops = late
        assert p == pytest.approx(sim.percentile_ms(q), rel=1e-9, abs=1e-6)
    assert [st.stage for st in s.stages] == list(problem.topo_order)
    assert all(st.queue.count == 0 and st.residence.count > 0 for st in s.stages)
    assert s.mean_accuracy == pytest.approx(plan.accuracy)
    assert s.cost_mean_per_hour == pytest.approx(plan.cost_per_hour, rel=1e-6)


def test_replica_changes_show_in_cost_and_replicas(planned):
    problem, plan = planned
    stage = plan.stages[0].stage
    before = plan.stages[0].replicas
    ev = config_events(problem, plan, [ReplicaChange(10.0, stage, before + 2)], start_ns=0)
    assert [e.replicas for e in ev if e.stage == stage] == [before, before + 2]
    price = problem.hardware[plan.stages[0].primary.hardware].cost_per_hour
    assert ev[-1].cost_per_hour - ev[0].cost_per_hour == pytest.approx(2 * price)
    run = simulate_run(problem, plan, problem.arrivals_s, changes=[ReplicaChange(10.0, stage, before + 2)])
    reps = run.summary.series.replicas[stage]
    assert reps[0] == before and reps[-1] == before + 2


def test_dropped_requests_carry_the_estimator_reason(planned):
    problem, plan = planned
    burst = np.sort(np.random.default_rng(0).uniform(0, 1.0, 2000))  # 2000 qps for a second: overload
    run = simulate_run(problem, plan, burst)
    assert run.summary.dropped > 0
    # the source sheds as its workers do (slipstream.planner.sim.gate), the rest is dropped by its deadline
    assert all(k.startswith(("deadline@", "shed@")) for k in run.summary.drops_by_reason)
    assert any(k.startswith("shed@") for k in run.summary.drops_by_reason) and run.sim.shed_share > 0
    res = results_from_sim(problem, plan, run.sim)
    d = next(r for r in res if r.status == "dropped")
    assert d.finished_ns <= d.deadline_ns and d.reason.startswith("stage ")
    assert summarize(res, slo_ms=problem.slo_ms).dropped == run.summary.dropped


def test_report_and_estimator_count_drops_as_late_alike(planned):
    problem, plan = planned
    # the planned traffic plus a short burst sized to the plan: a few drops (under 1 %), so the p99
    # stays finite
    arr = np.sort(np.concatenate([problem.arrivals_s, 10 + np.random.default_rng(1).uniform(0, 0.3, 46)]))
    run = simulate_run(problem, plan, arr)
    s = run.summary
    assert 0 < s.dropped < 0.01 * s.requests
    done_only = np.percentile(run.sim.latency_ms[~run.sim.dropped], 99, method="inverted_cdf")
    assert s.latency.p99_ms == pytest.approx(run.sim.p99_ms, rel=1e-9) and s.latency.p99_ms > done_only
    for q, p in ((50, s.latency.p50_ms), (95, s.latency.p95_ms), (99.9, s.latency.p999_ms)):
        assert p == pytest.approx(run.sim.percentile_ms(q), rel=1e-9)


def test_compare_rows_and_baseline_ratio():
    def runner(mode, tuned):
        if mode == "nope":
            raise ImportError("No module named planner.nope")
        if mode == "inferline":
            raise ModeNotApplicable("no feasible inferline plan")
        cost = {"cg-peak": 4.0, "milp": 1.0}[mode]
        res = [result(request_id="x", created_ns=0, finished_ns=10**6, deadline_ns=10**9)]
        from slipstream.loadgen.cost import ConfigEvent
        return summarize(res, slo_ms=100, configs=[ConfigEvent(0, "a", 1, cost * 3600 * 1000)],
                         end_ns=10**6, start_ns=0)

    rows = compare_runs(["milp+tuner", "cg-peak", "nope", "inferline"], runner)
    assert parse_mode("milp+tuner") == ("milp", True)
    assert rows[0].tuned and rows[0].cost_vs_baseline == pytest.approx(0.25)
    assert rows[1].cost_vs_baseline == pytest.approx(1.0)
    assert rows[2].failed and rows[2].error == "ImportError: No module named planner.nope"
    assert not rows[3].failed and rows[3].error == "no feasible inferline plan"
    assert failures(rows) == "nope: ImportError: No module named planner.nope"
    table = format_comparison(rows)
    assert "0.25x" in table and "nope              FAILED: ImportError" in table
    assert "inferline         unavailable: no feasible" in table
    with pytest.raises(ValueError):
        parse_mode("milp+oracle")


@pytest.mark.skipif(not (DATA / "aggregate_profiled.csv").exists(), reason="research-data not present")
def test_published_traffic_problem():
    from slipstream.loadgen.published import read_profiles, traffic_problem

    profiles = read_profiles(DATA / "aggregate_profiled.csv")
    assert set(profiles["yolov5m"].latency_ms) == {"cpu", "pascal", "ampere"}
    assert profiles["efficientnet-b0"].accuracy == pytest.approx(0.771)
    arr = np.sort(np.random.default_rng(0).uniform(0, 60, 1800))
    p = traffic_problem(DATA, arr)
    assert p.slo_ms == 250 and [s.name for s in p.stages] == ["detect", "classify"]
    assert p.edges[0].fanout > 1  # cars per frame
    assert p.rate_qps >= 30


def test_compare_rows_carry_the_estimate_of_each_real_run():
    import math
    from types import SimpleNamespace

    from slipstream.loadgen.compare import est_ratio

    res = [result(request_id="x", created_ns=0, finished_ns=100 * 10**6, deadline_ns=10**9)]
    est = SimpleNamespace(estimated_p99_ms=110.0, estimated_attainment=0.995, seed_p99_ms=(90.0, 110.0, 131.0),
                          drawn_p99_ms=math.nan, forward_p99_ms=125.0, forward_attainment=0.987, forward_shed=0.25,
                          unmeasured_pace=("lite2@cpu-2 carried from v3",))
    rows = compare_runs(["milp"], lambda mode, tuned: (summarize(res, slo_ms=1000, end_ns=10**9, start_ns=0), est))
    assert rows[0].predicted_p99_ms == 110.0 and rows[0].predicted_attainment == 0.995
    assert rows[0].forward_p99_ms == 125.0 and rows[0].forward_attainment == 0.987 and rows[0].forward_shed == 0.25
    table = format_comparison(rows)
    assert "est/meas" in table and "1.10" in table and "90-131" in table and "99.50%" in table
    assert "fwd/meas" in table and "1.25" in table and "98.70%" in table
    assert table.splitlines()[-1] == "milp: pace drawn for variants the calibration did not measure: lite2@cpu-2 carried from v3"
    assert est_ratio(math.inf, math.inf) == "inf=inf" and est_ratio(math.inf, 300.0) == "inf"
    assert est_ratio(100.0, math.inf) == "meas=inf" and est_ratio(math.nan, 100.0) == "-"
