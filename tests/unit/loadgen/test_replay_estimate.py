"""The like-for-like estimate: replaying a run's own arrivals and replica changes through the plan.
On a run the estimator itself produced, it must give back exactly that run's figures."""
from dataclasses import replace

import numpy as np
import pytest

from slipstream.loadgen.replay_estimate import estimate_run, format_like_for_like, run_arrivals, run_changes
from slipstream.loadgen.simulate import simulate_run
from slipstream.planner.estimator import ReplicaChange
from tests.control_records import result


def control_of(plan, changes, start_ns: int) -> list[tuple[int, dict]]:
    """The control topic of a run: the plan's StageConfigs before it, one per replica change at its time."""
    def record(sp, epoch: int, replicas: int) -> dict:
        a = sp.primary
        return {"stage": sp.stage, "variant": a.variant, "hardware": a.hardware, "max_batch": a.max_batch,
                "batch_timeout_ms": a.batch_timeout_ms, "replicas": replicas, "epoch": epoch}
    out = [(start_ns - 10**9, record(sp, i, sp.replicas)) for i, sp in enumerate(plan.stages)]
    for i, c in enumerate(changes):
        sp = plan.stage(c.stage)
        out.append((start_ns + round(c.time_s * 1e9), record(sp, len(plan.stages) + i,
                                                             c.replicas + sp.replicas - sp.primary.replicas)))
    return out


def test_the_estimator_replaying_its_own_run_gives_back_that_run(planned):
    problem, plan = planned
    first = plan.stages[0]
    changes = [ReplicaChange(5.3, first.stage, first.primary.replicas + 1, first.assignments.index(first.primary)),
               ReplicaChange(12.7, first.stage, first.primary.replicas, first.assignments.index(first.primary))]
    arrivals = problem.arrivals_s - problem.arrivals_s[0]
    run = simulate_run(problem, plan, arrivals, changes=changes, seed=4, start_ns=10**18)
    from slipstream.loadgen.simulate import results_from_sim

    results = results_from_sim(problem, plan, run.sim, start_ns=10**18)
    times, ids = run_arrivals(results[::-1])  # results arrive in any order: they come back in arrival order
    assert np.allclose(times, np.sort(arrivals), atol=1e-6)
    created = {r.request_id: r.created_ns for r in results}
    assert sorted(ids) == sorted(created) and all(created[i] == min(created.values()) + round(t * 1e9)
                                                  for i, t in zip(ids, times))
    start = min(created.values())  # the first arrival: the run's 0 s
    control = control_of(plan, changes, start_ns=10**18)
    got = run_changes(control, plan, start)
    # at the StageConfig's time, not on the report's 1 s grid
    assert [(c.time_s, c.stage, c.replicas) for c in got] == [
        (pytest.approx(c.time_s - (start - 10**18) / 1e9, abs=1e-6), c.stage, c.replicas) for c in changes]
    est = estimate_run(problem, plan, run.summary, results, control=control, seed=4)
    assert est.estimated_p99_ms == pytest.approx(est.measured_p99_ms, rel=0.02)
    assert est.estimated_attainment == pytest.approx(est.measured_attainment, abs=0.005)
    assert "end-to-end p99 ms" in format_like_for_like(est)


def test_components_set_each_measured_part_of_a_hop_beside_the_estimators_input(planned):
    from slipstream.loadgen.replay_estimate import components
    from slipstream.planner.sim.params import Network, ServiceTime, Transit

    problem, plan = planned
    sp = plan.stages[0]
    a = sp.primary
    curve = problem.stage(sp.stage).variant(a.variant).latency[a.hardware]
    ms = 1_000_000
    results = []
    for i in range(100):
        t0 = i * 10**9
        hop = {"stage": sp.stage, "variant": a.variant, "batch_size": 1, "enqueued_ns": t0,
               "received_ns": t0 + 7 * ms, "started_ns": t0 + 9 * ms,
               "finished_ns": t0 + 9 * ms + int(2 * curve.ms(1) * ms), "worker": "w"}
        results.append(result(created_ns=t0, hops=[hop]))
    got = {c.name: c for c in components(problem, plan, results, Network.every_hop(Transit.constant(3.0)),
                                         ServiceTime())}
    assert got["transit"].measured_ms == pytest.approx((7.0, 7.0)) and got["transit"].estimated_ms == (3.0, 3.0)
    assert got["queue+batch"].measured_ms == pytest.approx((2.0, 2.0)) and got["queue+batch"].estimated_ms is None
    assert got["service"].measured_ms[1] == pytest.approx(2 * got["service"].estimated_ms[1], rel=0.01)


def test_the_estimate_is_the_median_p99_over_seeds(planned):
    from slipstream.loadgen.simulate import results_from_sim
    from slipstream.planner.sim.params import ServiceTime

    problem, plan = planned
    arrivals = problem.arrivals_s - problem.arrivals_s[0]
    run = simulate_run(problem, plan, arrivals, seed=1, start_ns=10**18)
    results = results_from_sim(problem, plan, run.sim, start_ns=10**18)
    est = estimate_run(replace(problem, service=ServiceTime("lognormal", cv=0.8)), plan, run.summary, results, seed=7)
    assert len(est.seed_p99_ms) == 5 and list(est.seed_p99_ms) == sorted(est.seed_p99_ms)
    assert len(set(est.seed_p99_ms)) > 1  # the seeds differ, so the median is a choice
    assert est.estimated_p99_ms == est.seed_p99_ms[2]
    assert "per seed" in format_like_for_like(est)


def test_the_replans_batching_comes_from_what_the_run_saw_on_the_control_topic():
    from slipstream.loadgen.replay_estimate import batching_changes
    from slipstream.planner.estimator import BatchingChange
    from slipstream.planner.plan import Assignment, Plan, StagePlan

    plan = Plan("milp", (StagePlan("a", (Assignment("v", "cpu", 8, 1, 1.0, 100.0),)),
                         StagePlan("b", (Assignment("x", "cpu", 1, 1),))), feasible=True)
    s0 = 10**18

    def cfg(t_s, epoch, variant="v", batch=8, timeout=100.0, stage="a"):
        return (s0 + int(t_s * 1e9), {"stage": stage, "epoch": epoch, "variant": variant, "hardware": "cpu",
                                      "replicas": 1, "max_batch": batch, "batch_timeout_ms": timeout})

    control = [cfg(-60, 3, "w", 2, 5.0),  # an earlier run's
               cfg(-1, 7),  # this run's plan: as planned, no change
               cfg(-1, 7, "x", 1, 0.0, stage="b"),
               cfg(10, 8, batch=4, timeout=50.0),  # a re-plan: smaller batches, same model: at once
               (s0 + 11 * 10**9, {"stage": "a", "replicas": 2, "reason": "scale-up"}),  # a ScalingAction
               cfg(12, 6, "w", 1, 0.0),  # an older epoch arriving late: ignored
               cfg(20, 9, "w", 4, 50.0),  # another variant: after a model load
               cfg(25, 10, "w", 4, 50.0)]  # the same again (a replica change): nothing new
    assert batching_changes(control, plan, s0, activation_s=1.5) == [
        BatchingChange(10.0, "a", "v", "cpu", 4, 50.0), BatchingChange(21.5, "a", "w", "cpu", 4, 50.0)]
    started_on_other = batching_changes([cfg(-1, 7, "w", 2, 5.0)], plan, s0, activation_s=1.5)
    assert started_on_other == [BatchingChange(0.0, "a", "w", "cpu", 2, 5.0)]  # the run started on epoch 7, not the plan


def test_the_forward_prediction_of_a_run_without_changes_is_the_drawn_pace_estimate(planned):
    """Untuned, no replica change, no re-plan: the forward prediction and the drawn-pace like-for-like
    replay simulate the same thing; the run's own changes are not the forward prediction's."""
    from slipstream.loadgen.simulate import results_from_sim

    problem, plan = planned
    arrivals = problem.arrivals_s - problem.arrivals_s[0]
    run = simulate_run(problem, plan, arrivals, seed=2, start_ns=10**18)
    results = results_from_sim(problem, plan, run.sim, start_ns=10**18)
    est = estimate_run(problem, plan, run.summary, results, seed=3, forward=[])
    assert est.forward_p99_ms == pytest.approx(est.drawn_p99_ms, rel=1e-9)
    assert est.forward_attainment == pytest.approx(est.drawn_attainment, abs=1e-9)
    assert "p99, forward" in format_like_for_like(est) and "did not measure" not in format_like_for_like(est)
    assert "(pace drawn for variants the calibration did not measure: w@cpu carried from v3)" in \
        format_like_for_like(replace(est, unmeasured_pace=("w@cpu carried from v3",)))
    assert np.isnan(estimate_run(problem, plan, run.summary, results, seed=3).forward_p99_ms)  # not asked


def test_the_forward_prediction_steps_the_tuner_over_the_arrivals_that_came(planned):
    """A rate three times the plan's after 10 s: the tuner policy, stepped over those arrivals, scales
    up only after the step, and the forward prediction with its changes serves more than the plan alone."""
    from slipstream.loadgen.replay_estimate import forward_estimate
    from slipstream.loadgen.simulate import tuner_changes
    from slipstream.loadgen.workloads import Phase, varying_arrivals
    from slipstream.tuner.policy import TunerConfig

    problem, plan = planned
    rng = np.random.default_rng(0)
    arrivals = varying_arrivals([Phase(problem.rate_qps / 2, 1.0, 10.0), Phase(3 * problem.rate_qps, 1.0)], 25.0, rng)
    changes = tuner_changes(problem, plan, arrivals, tick_s=0.5, config=TunerConfig(activation_s=1.0, max_replicas=8))
    ups = [c for c in changes if c.replicas > plan.stage(c.stage).primary.replicas]
    assert ups and min(c.time_s for c in ups) > 10.0
    came = replace(problem, arrivals_s=arrivals)
    tuned = forward_estimate(came, plan, changes, seeds=3)
    alone = forward_estimate(came, plan, [], seeds=3)
    assert tuned.attainment > alone.attainment + 0.05
