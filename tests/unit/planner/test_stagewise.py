"""The stage-by-stage fast path gives exactly the event loop's result wherever it is used."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from slipstream.planner.estimator import HostModel, Network, ReplicaChange, ServiceTime, SimOptions, Transit, simulate
from slipstream.planner.plan import Assignment, Plan, StagePlan
from slipstream.planner.problem import EdgeOption
from slipstream.planner.sim import stagewise
from slipstream.loadgen.synthetic import random_problem

DIAMOND = (EdgeOption("s0", "s1", fanout=1.5), EdgeOption("s0", "s2", probability=0.6),
           EdgeOption("s1", "s3"), EdgeOption("s2", "s3", fanout=2.0))


def random_plan(problem, rng: np.random.Generator, load: float) -> Plan:
    """Each stage: one or two replica groups with random hardware, batch, timeout, sized for ``load``."""
    stages = []
    for st in problem.stages:
        groups = []
        for _ in range(int(rng.integers(1, 3))):
            v = st.variants[int(rng.integers(len(st.variants)))]
            hw = sorted(v.latency)[int(rng.integers(len(v.latency)))]
            b = int(rng.choice([1, 2, 4, 8]))
            mu = v.latency[hw].throughput_qps(b)
            need = problem.stage_rate(st.name) / mu / load
            groups.append(Assignment(v.name, hw, b, max(1, int(round(need))), float(rng.uniform(0.2, 1.0)),
                                     float(rng.uniform(0, 1.5) * v.latency[hw].ms(b))))
        stages.append(StagePlan(st.name, tuple(groups), int(rng.choice([4, 6]))))
    return Plan("random", tuple(stages), True)


def results(res) -> tuple:
    return (res.latency_ms.tobytes(), res.dropped.tobytes(), res.drop_stage.tobytes(), res.drop_info_ns.tobytes(),
            res.stage_ms.tobytes(), res.batches)


CASES = [(seed, edges, scaling, load) for seed in range(4) for edges in ("chain", "diamond")
         for scaling in ("in-worker", "rebalance", "mixed") for load in (0.7, 1.1)]
CASES.append((54, "diamond", "in-worker", 1.1))  # batches of one queue ending at one instant


@pytest.mark.parametrize("seed, edges, scaling, load", CASES)
def test_stagewise_equals_the_event_loop(seed, edges, scaling, load):
    extra = {} if edges == "chain" else {"edges": DIAMOND}
    p = random_problem(seed, stages=4, variants=2, hardware=2, rate_qps=80.0, slo_ms=250.0, sim_seconds=20.0,
                       **extra)
    rng = np.random.default_rng(seed)
    plan = random_plan(p, rng, load)
    modes = scaling if scaling != "mixed" else {"s0": "rebalance", "s2": "rebalance"}
    p = replace(p, hop_ms=float(rng.choice([0.0, 1.5])))
    options = SimOptions(scaling=modes, fanout_dist="poisson" if seed % 2 else "round")
    fast = simulate(p, plan, options)
    slow = simulate(p, plan, replace(options, method="events"))
    assert fast.requests > 1000
    assert results(fast) == results(slow)


@pytest.mark.parametrize("options", [
    {"host": HostModel(4.0)}, {"schedule": [ReplicaChange(1.0, "s0", 2)]},
    {"service": ServiceTime("exponential")}, {"network": Network.every_hop(Transit.shifted_exponential(1.0, 1.0))},
    {"network": Network(fetch_interval_ms=5.0)}, {"network": Network(to_join=Transit.lognormal(1.0, 0.5))},
])
def test_anything_that_couples_stages_in_time_runs_the_event_loop(options):
    base = dict(host=None, schedule=(), service=ServiceTime(), network=Network())
    assert stagewise.applies(**base)
    assert not stagewise.applies(**(base | options))
