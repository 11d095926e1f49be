"""A request's deadline is its creation plus the SLO, the same wherever a request is made: the client's
records, the simulated run's results, and the deadlines the estimator's batching reads."""
from dataclasses import replace

import numpy as np

from slipstream.loadgen.simulate import results_from_sim
from slipstream.planner.estimator import simulate
from slipstream.streams.client import request_record

MS = 1_000_000


def test_the_client_record_deadline_is_created_plus_slo():
    rec = request_record("p", "r1", 1_000, 250.0, "application/octet-stream", b"")
    assert rec.deadline_ns - rec.created_ns == 250 * MS


def test_simulated_results_carry_created_plus_slo(planned):
    problem, plan = planned
    results = results_from_sim(problem, plan, simulate(replace(problem, arrivals_s=problem.arrivals_s[:50]), plan), start_ns=10**18)
    assert {r.deadline_ns - r.created_ns for r in results} == {int(problem.slo_ms * MS)}


def test_the_estimator_drops_against_created_plus_slo(planned):
    problem, plan = planned
    burst = np.sort(np.concatenate([problem.arrivals_s[:20], np.full(400, 1.0)]))
    sim = simulate(replace(problem, arrivals_s=burst, seed=0), plan)
    dropped = np.flatnonzero(sim.dropped)
    assert dropped.size, "the burst must overload the plan"
    arrival_ns = (burst[dropped] * 1e9).astype(np.int64)
    assert np.all(sim.drop_info_ns[dropped, 0] - arrival_ns == int(problem.slo_ms * MS))
