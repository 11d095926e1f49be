"""The estimator's source gate (``slipstream.planner.sim.gate``): the workers' admission (``slipstream.streams.shedding``)
on simulated arrivals, at the capacity of the hand-off record the planner publishes."""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pytest

from slipstream.agents.admission import admit
from slipstream.agents.metrics import StageMetrics
from slipstream.agents.stage.intake import Intake
from slipstream.planner.estimator import SimOptions, simulate
from slipstream.planner.plan import Assignment
from slipstream.planner.service import handoff, handoff_record
from slipstream.planner.sim.gate import capacity_steps, judge_arrivals
from slipstream.planner.sim.params import ReplicaChange
from slipstream.schemas.records import TunerHandoff
from slipstream.streams import contract
from slipstream.streams.client import make_request
from tests.unit.agents.test_admission import TP, pipeline, written
from tests.unit.planner.planner_builders import one_stage, single_plan

MS = 1_000_000
CAPACITY_QPS = 40.0  # one replica, batch 1 of 25 ms


def setup(rate_qps: float, seconds: float = 60.0):
    problem = one_stage({1: 1000.0 / CAPACITY_QPS}, slo_ms=400.0, rate=rate_qps, seconds=seconds)
    plan = single_plan({"a": [Assignment("v", "cpu", 1, 1)]})
    record = handoff_record(handoff(problem, plan, lambda arr, windows: np.zeros(len(windows))), problem.name, 0)
    return problem, plan, record


def test_at_twice_the_capacity_the_source_sheds_the_excess_and_serves_its_capacity():
    problem, plan, record = setup(2 * CAPACITY_QPS)
    sim = simulate(problem, plan, SimOptions(handoff=record))
    assert sim.shed_share == pytest.approx(0.5, abs=0.05)
    assert sim.attainment == pytest.approx(0.5, abs=0.05)  # about capacity / offered, not ~0
    assert sim.shed_share == pytest.approx(sim.drop_rate, abs=0.02)  # the excess goes at the door
    assert sim.reason(int(np.flatnonzero(sim.shed)[0])).startswith("stage a: shed: ")


def test_below_capacity_nothing_is_shed():
    problem, plan, record = setup(0.5 * CAPACITY_QPS)
    sim = simulate(problem, plan, SimOptions(handoff=record))
    assert sim.shed_share == 0.0 and sim.attainment > 0.99


def test_without_a_handoff_nothing_is_shed_as_a_worker_that_read_none():
    problem, plan, _ = setup(2 * CAPACITY_QPS)
    assert simulate(problem, plan).shed_share == 0.0


def test_the_capacity_follows_the_replicas_in_force():
    _, plan, record = setup(CAPACITY_QPS)
    times, caps = capacity_steps(record, plan, [ReplicaChange(10.0, "a", 3)])
    assert times == [0, 10_000_000_000] and caps == pytest.approx([CAPACITY_QPS, 3 * CAPACITY_QPS], rel=1e-6)


def agent_refusals(record: TunerHandoff, created_ns: np.ndarray, serve_ns: int, tmp_path) -> list[tuple[int, str]]:
    """What a source worker refuses of these requests, each read at its creation: its intake's gate
    rate from the hand-off (``Intake.on_plan``), its admission judging each record."""
    pipe = pipeline(tmp_path)
    worker = Intake(pipe, "s0", StageMetrics.create(pipe.name, "s0"), *[None] * 4)
    worker.on_plan("TunerHandoff", replace(record, pipeline=pipe.name))
    bounds = contract.Bounds.of(pipe, "s0", 1 << 20)
    out = []
    for i, c in enumerate(created_ns.tolist()):
        r = written(pipe, i, make_request(pipe, b"p", created_ns=c, slo_ms=400))
        got = admit(pipe, [(TP, [r], c)], bounds, c, lambda deadline: worker.gate.judge(deadline, c, serve_ns))
        out += [(i, why) for _, why in got.dropped]
    return out


def test_the_estimator_and_a_worker_refuse_the_same_requests_for_the_same_reasons(tmp_path):
    _, plan, record = setup(CAPACITY_QPS)
    rng = np.random.default_rng(7)
    start = time.time_ns()
    created = start + np.cumsum(rng.exponential(1e9 / (2 * CAPACITY_QPS), 400)).astype(np.int64)
    serve_ns = 25 * MS
    agent = agent_refusals(record, created, serve_ns, tmp_path)
    sim = judge_arrivals("a", created - start, created - start + 400 * MS, serve_ns, capacity_steps(record, plan, ()))
    assert len(agent) > 100  # it sheds: the check compares decisions, not two empty lists
    assert [i for i, _ in sim] == [i for i, _ in agent]
    assert [w.split(":")[0] for _, w in sim] == [w.split(":")[0] for _, w in agent]
