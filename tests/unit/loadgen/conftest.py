import pytest

from slipstream.planner.milp import MilpOptions, solve
from slipstream.loadgen.synthetic import random_problem


@pytest.fixture(scope="module")
def planned():
    """A small two-stage problem and its milp plan (feasible)."""
    problem = random_problem(3, stages=2, rate_qps=40.0, sim_seconds=20.0)
    plan = solve(problem, MilpOptions(solver="highs", time_limit_s=5.0))
    assert plan.feasible
    return problem, plan
