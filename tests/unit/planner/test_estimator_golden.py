"""The estimator's prediction on fixed problems, pinned: a speed-up must not change it.

Each case's :func:`summary` (request, drop, batch and event counts exact; latency percentiles, mean and
per-stage residence in ms within a relative :data:`REL`) is pinned in ``estimator_golden.json``. A change
that alters it changes what the estimator predicts, so it must say why and record the new summary (a
failing case prints its own). Times are compared within a tolerance, not bit for bit: the same
prediction differs in the last bits between CPUs (BLAS kernels, vectorised ``exp``), counts do not.

History of the pins (git has the details): the ``example-*`` cases were re-pinned when a mixed stage
began to be simulated as it is deployed (one pool on the primary's hardware and batching,
``slipstream.planner.sim.world.build``): their detect stage is det-s on gpu (b8 x1, weight 1) and det-s on cpu
(b4 x2, weight 0.3), deployed as three det-s replicas on gpu at b8, 5 ms, and
``test_a_mixed_stage_with_one_variant_is_its_deployed_single_assignment`` keeps the two forms equal.
``example-two-variants`` pins a pool that routes to two variants. ``example-calibrated-schedule`` was
re-pinned when the agents' predictor began to learn in the simulator (402 drops, 377 before), and
again when a batch size idle for 1 s began to forget its runs (``PREDICT_IDLE_S``: 504 drops, 4,205
served where 4,307 were; in this overloaded schedule the stage runs one doomed batch about once a
second where it used to drop for the whole 5-s horizon).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from slipstream.planner.estimator import HostModel, Network, ReplicaChange, ServiceTime, SimOptions, Transit, simulate
from slipstream.planner.plan import Assignment
from slipstream.planner.problem import parse_problem
from planner_builders import example_problem_doc, single_plan


def chain4(slo_ms: float):
    """Four stages in a chain at 300 qps, shaped like ``bench planner``'s (batches 2-8, 2-4 replicas)."""
    stages = [{"name": f"s{i}", "variants": [{"name": "v", "accuracy": 0.9, "latency_ms": {"cpu": {
        "1": 4 + i, "2": 6 + i, "4": 9 + 2 * i, "8": 15 + 2 * i}}}]} for i in range(4)]
    p = parse_problem({"slo_ms": slo_ms, "seed": 3, "arrival": {"rate_qps": 300, "sim_seconds": 30},
                       "hardware": {"cpu": {"cost_per_hour": 1.0}}, "stages": stages,
                       "edges": [{"from": f"s{i}", "to": f"s{i + 1}"} for i in range(3)]})
    plan = single_plan({f"s{i}": [Assignment("v", "cpu", b, c, 1.0, t)]
                        for i, (b, c, t) in enumerate([(2, 4, 3.0), (4, 3, 9.0), (8, 2, 21.0), (8, 4, 21.0)])})
    return p, plan


def example():
    """docs/planner.md's example: detect (two replica groups) fans out 1.5x to classify."""
    p = parse_problem(example_problem_doc(120, sim_seconds=40))
    plan = single_plan({"detect": [Assignment("det-s", "gpu", 8, 1, 1.0, 5.0),
                                   Assignment("det-s", "cpu", 4, 2, 0.3, 20.0)],
                        "classify": [Assignment("cls", "cpu", 4, 2, 1.0, 10.0)]})
    return p, plan


def deployed_example():
    """The example as its workers run it: detect's assignments as one pool (see the module docstring)."""
    p, _ = example()
    return p, single_plan({"detect": [Assignment("det-s", "gpu", 8, 3, 1.0, 5.0)],
                           "classify": [Assignment("cls", "cpu", 4, 2, 1.0, 10.0)]})


def two_variants():
    """The example with a second detect variant on gpu: detect's pool routes 60/40 between them."""
    doc = example_problem_doc(120, sim_seconds=40)
    doc["stages"][0]["variants"].append({"name": "det-l", "accuracy": 0.7, "latency_ms": {"gpu": {"1": 9, "8": 22}}})
    plan = single_plan({"detect": [Assignment("det-s", "gpu", 8, 2, 0.6, 5.0), Assignment("det-l", "gpu", 4, 1, 0.4, 8.0)],
                        "classify": [Assignment("cls", "cpu", 4, 2, 1.0, 10.0)]})
    return parse_problem(doc), plan


def calibrated():
    """The example with a calibration's Kafka transits and fetch cadence, service spread and shared host."""
    p, plan = example()
    return replace(p, **CALIBRATED), plan


CALIBRATED = dict(network=Network(ingress=Transit.lognormal(2.0, 0.5), between=Transit.shifted_exponential(1.0, 2.0),
                                  to_join=Transit.constant(1.0), to_results=Transit.lognormal(1.5, 0.3, 0.5),
                                  fetch_interval_ms=5.0),
                  service=ServiceTime("lognormal", cv=0.3), host=HostModel(6.0, background_cores=0.5))
SCHEDULE = [ReplicaChange(10.0, "detect", 2), ReplicaChange(25.0, "classify", 1)]

CASES = {
    "chain4-auto": (lambda: chain4(300.0), {}, {}),
    "chain4-events": (lambda: chain4(300.0), {}, {"method": "events"}),
    "chain4-tight-auto": (lambda: chain4(70.0), {}, {}),
    "chain4-tight-events": (lambda: chain4(70.0), {}, {"method": "events"}),
    "chain4-tight-rebalance-hop": (lambda: chain4(70.0), {"hop_ms": 1.5}, {"scaling": "rebalance"}),
    "chain4-tight-no-drops": (lambda: chain4(70.0), {}, {"drop_late": False}),
    "example-round": (example, {}, {}),
    "example-poisson-events": (example, {}, {"fanout_dist": "poisson", "method": "events"}),
    "example-schedule-rebalance": (example, {}, {"schedule": SCHEDULE, "scaling": "rebalance", "pause_s": 2.0}),
    "example-calibrated": (calibrated, {}, {}),
    "example-calibrated-schedule": (calibrated, {"activation_s": 3.0}, {"schedule": SCHEDULE}),
    "example-two-variants": (two_variants, {}, {}),
    "example-two-variants-events": (two_variants, {}, {"method": "events", "scaling": "rebalance"}),
}

PINNED = json.loads((Path(__file__).parent / "estimator_golden.json").read_text())  # summary() per case


def summary(res) -> dict:
    """What a user reads of a prediction: counts exact, times in ms (compared within :data:`REL`)."""
    served = np.sort(res.latency_ms[~res.dropped])
    q = lambda f: float(served[min(int(f * served.size), served.size - 1)]) if served.size else None  # noqa: E731
    stage = [float(np.nanmean(col)) if np.isfinite(col).any() else None for col in res.stage_ms.T]
    return {"requests": res.requests, "dropped": int(res.dropped.sum()), "batches": res.batches,
            "events": res.events, "drops_by_stage": np.bincount(res.drop_stage + 1).tolist(),
            "arrival_s_sum": float(res.arrival_s.sum()), "p50_ms": q(0.5), "p90_ms": q(0.9),
            "p99_ms": q(0.99), "max_ms": q(1.0), "mean_ms": float(served.mean()) if served.size else None,
            "stage_mean_ms": stage}


REL = 1e-4  # a relative difference in a time below this is the same prediction (BLAS kernels, libm)


def same(pinned, got) -> bool:
    if isinstance(pinned, list):
        return len(pinned) == len(got) and all(same(a, b) for a, b in zip(pinned, got))
    if isinstance(pinned, float) and got is not None:
        return abs(pinned - got) <= REL * max(abs(pinned), 1.0)
    return pinned == got


def digest(res) -> str:
    """Every per-request array, bit for bit: for comparing two runs on the same machine only."""
    h = hashlib.sha256()
    for a in (res.arrival_s, res.latency_ms, res.dropped, res.drop_stage, res.drop_info_ns, res.stage_ms):
        h.update(np.ascontiguousarray(a).tobytes())
    h.update(f"{res.batches} {res.events}".encode())
    return h.hexdigest()[:20]


def run(case: str):
    make, changes, options = CASES[case]  # changes: the problem's fields; options: SimOptions'
    p, plan = make()
    return simulate(replace(p, **changes), plan, SimOptions(**options))


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_estimators_output_is_unchanged(case):
    res = run(case)
    assert res.requests > 1000
    got = summary(res)
    changed = {k: (v, got[k]) for k, v in PINNED[case].items() if not same(v, got[k])}
    assert not changed, f"{case}: the estimator's prediction changed (pinned, now): {changed}\nnow: {got}"


@pytest.mark.parametrize("case", sorted(c for c in CASES if c.startswith("example-") and "two-variants" not in c))
def test_a_mixed_stage_with_one_variant_is_its_deployed_single_assignment(case):
    _, changes, options = CASES[case]
    p, plan = deployed_example()
    if "schedule" in options:  # the primary's change 1 -> 2 replicas is the pool's 3 -> 4
        options = options | {"schedule": [ReplicaChange(10.0, "detect", 4), SCHEDULE[1]]}
    if "calibrated" in case:
        p = replace(p, **CALIBRATED)
    assert digest(simulate(replace(p, **changes), plan, SimOptions(**options))) == digest(run(case))


def test_the_cases_reach_every_branch_of_the_batching_policy(monkeypatch):
    """Drops, and sub-batches that defer the rest of a window, in both the stage-by-stage path and
    the event loop (a spy on the real ``decide``)."""
    from slipstream.planner.sim import servers, stagewise
    from slipstream.streams import batching
    seen = []

    def spy(*args):
        d = batching.decide(*args)
        seen.append((bool(d.drop), bool(d.defer)))
        return d
    for module in (servers, stagewise):
        seen.clear()
        monkeypatch.setattr(module, "decide", spy)
        for case in ("chain4-tight-auto", "chain4-tight-events"):
            run(case)
        assert any(drop for drop, _ in seen) and any(defer for _, defer in seen), module.__name__
