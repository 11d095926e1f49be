"""The like-for-like estimate: replaying a run's own arrivals and replica changes through the plan.
On a run the estimator itself produced, it must give back exactly that run's figures."""
import numpy as np
import pytest

from loadgen.replay_estimate import estimate_run, format_like_for_like, run_arrivals, run_changes
from loadgen.simulate import simulate_run
from planner.estimator import ReplicaChange


def test_the_estimator_replaying_its_own_run_gives_back_that_run(planned):
    problem, plan = planned
    first = plan.stages[0]
    changes = [ReplicaChange(5.0, first.stage, first.primary.replicas + 1, first.assignments.index(first.primary)),
               ReplicaChange(12.0, first.stage, first.primary.replicas, first.assignments.index(first.primary))]
    arrivals = problem.arrivals_s - problem.arrivals_s[0]
    run = simulate_run(problem, plan, arrivals, changes=changes, seed=4, start_ns=10**18)
    from loadgen.simulate import results_from_sim

    results = results_from_sim(problem, plan, run.sim, start_ns=10**18)
    assert np.allclose(run_arrivals(results), np.sort(arrivals), atol=1e-6)
    got = run_changes(run.summary, plan)
    assert [(round(c.time_s), c.stage, c.replicas) for c in got] == [(round(c.time_s), c.stage, c.replicas)
                                                                       for c in changes]
    est = estimate_run(problem, plan, run.summary, results, seed=4)
    assert est.estimated_p99_ms == pytest.approx(est.measured_p99_ms, rel=0.02)
    assert est.estimated_attainment == pytest.approx(est.measured_attainment, abs=0.005)
    assert "end-to-end p99 ms" in format_like_for_like(est)
