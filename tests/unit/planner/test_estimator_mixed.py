"""A mixed (Loki-style) stage is simulated as it is deployed: one pool of the stage's total replicas on
the primary assignment's hardware and batching, each window split by variant with the workers' rule
(``slipstream.streams.shares``), the variants' items run one after the other with each variant's latency."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from slipstream.agents.window import Item, split_variants
from slipstream.planner.estimator import SimOptions, Unprofiled, simulate
from slipstream.planner.modes import check
from slipstream.planner.plan import Assignment
from slipstream.planner.problem import parse_problem
from slipstream.planner.service import stage_configs
from slipstream.loadgen.synthetic import random_problem
from planner_builders import single_plan
from tests.control_records import request

FAST, SLOW = 10.0, 30.0  # ms, any batch of 1..4 on cpu; slow takes 1 ms on gpu


def problem(slo_ms: float = 1000.0):
    const = {"1": 1.0, "4": 1.0}
    return parse_problem({
        "slo_ms": slo_ms, "arrival": {"rate_qps": 10},
        "hardware": {"cpu": {"cost_per_hour": 0.2}, "gpu": {"cost_per_hour": 2.5}},
        "stages": [{"name": "a", "variants": [
            {"name": "fast", "accuracy": 0.7, "latency_ms": {"cpu": {k: FAST * v for k, v in const.items()}}},
            {"name": "slow", "accuracy": 0.9, "latency_ms": {"cpu": {k: SLOW * v for k, v in const.items()},
                                                              "gpu": const}}]}],
        "edges": []})


# the solver's view: fast on cpu (primary, 60 %) and slow on a gpu of its own (40 %); deployed: two
# replicas on cpu, batch 4, no timeout, each with both variants
MIXED = single_plan({"a": [Assignment("fast", "cpu", 4, 1, 0.6, 0.0), Assignment("slow", "gpu", 1, 1, 0.4, 0.0)]})

# by hand: crc32(id) / 2**32 < 0.6 is fast (r0 .477, r1 .051, r2 .578, r4 .490, r5 .041, r6 .576),
# else slow (r3 .887, r7 .892, r12 .651, r13 .819, r16 .632, r17 .839)
BURSTS = [(0.0, ["r3", "r0", "r7", "r1"]),  # replica 1 at 0: slow r3 r7 0-30, then fast r0 r1 30-40
          (0.005, ["r2", "r12", "r4", "r13"]),  # replica 2 at 5: fast r2 r4 5-15, then slow r12 r13 15-45
          (0.020, ["r16", "r5"]),  # both busy; replica 1 at 40: slow r16 40-70, then fast r5 70-80
          (0.200, ["r6"]),  # alone: fast, 10
          (0.300, ["r17"])]  # alone: slow on cpu, 30 (1 ms only on the gpu the solver had in mind)
EXPECTED_MS = [30, 40, 30, 40, 10, 40, 10, 40, 50, 60, 10, 30]


@pytest.mark.parametrize("method", ["auto", "events"])
def test_a_mixed_stage_runs_as_one_pool_on_the_primarys_hardware(method):
    arr = np.array([t for t, ids in BURSTS for _ in ids])
    ids = [i for _, ids in BURSTS for i in ids]
    res = simulate(replace(problem(), arrivals_s=arr, hop_ms=0.0), MIXED, SimOptions(request_ids=ids, method=method))
    assert not res.dropped.any()
    assert res.latency_ms.tolist() == pytest.approx(EXPECTED_MS)
    assert res.batches == 8  # two sub-batches in each of the three mixed windows, one each alone


def test_the_worker_and_the_estimator_route_each_request_id_to_the_same_variant():
    """Requests one at a time, so each one's latency says which variant served it in the estimator;
    the worker's split (``slipstream.agents.window.split_variants``) of the config the planner publishes for
    the plan must agree on every id."""
    ids = [f"req-{k:04d}" for k in range(300)]
    res = simulate(replace(problem(), arrivals_s=np.arange(len(ids)) * 0.1, hop_ms=0.0), MIXED,
                   SimOptions(request_ids=ids))
    served = {i: {FAST: "fast", SLOW: "slow"}[round(ms)] for i, ms in zip(ids, res.latency_ms.tolist())}

    rec = stage_configs("p", MIXED, problem(), epoch=1)[0]
    groups, dropped = split_variants([Item(None, request(request_id=i), 0, None, k) for k, i in enumerate(ids)], rec,
                                     {"fast": 0.7, "slow": 0.9})
    worker = {it.req.request_id: v for v, items in groups.items() for it in items}
    assert not dropped and worker == served
    assert 0.5 < sum(v == "fast" for v in served.values()) / len(ids) < 0.7  # about its 60 % share


def test_the_published_config_is_the_simulated_pool_and_costs_what_it_runs_on():
    rec = stage_configs("p", MIXED, problem(), epoch=1)[0]
    assert (rec.variant, rec.hardware, rec.max_batch, rec.replicas) == ("fast", "cpu", 4, 2)
    assert rec.routing == {"fast": 0.6, "slow": 0.4}
    assert rec.cost_per_hour == pytest.approx(2 * 0.2)  # both replicas on cpu, not 0.2 + 2.5
    from slipstream.loadgen.simulate import config_events  # a simulated run is priced as deployed too

    (ev,) = config_events(problem(), MIXED)
    assert (ev.replicas, ev.cost_per_hour, ev.hardware) == (2, pytest.approx(rec.cost_per_hour), "cpu")


def test_a_variant_without_a_profile_on_the_primarys_hardware_is_refused():
    plan = single_plan({"a": [Assignment("slow", "gpu", 4, 2, 0.6, 0.0), Assignment("fast", "cpu", 4, 1, 0.4, 0.0)]})
    with pytest.raises(Unprofiled, match="fast has no latency profile there"):
        simulate(replace(problem(), arrivals_s=np.arange(10) * 0.1), plan)
    checked = check(problem(), plan)
    assert not checked.feasible and "deployed form" in checked.reason


@pytest.mark.parametrize("scaling", ["in-worker", "rebalance"])
def test_mixed_pools_give_the_event_loops_result_stage_by_stage(scaling, monkeypatch):
    """Two variants per stage on a tight SLO (drops and deferred sub-batches inside mixed windows):
    the stage-by-stage path equals the event loop."""
    from slipstream.planner.sim import groups
    p = random_problem(7, stages=3, variants=2, hardware=2, rate_qps=150.0, slo_ms=120.0, sim_seconds=20.0)
    plan = single_plan({s.name: [Assignment("v0", "cpu-1", 4, 3, 0.5, 5.0), Assignment("v1", "cpu-4", 2, 2, 0.5, 0.0)]
                        for s in p.stages})
    split = groups.Mix.split
    mixed_windows = []
    monkeypatch.setattr(groups.Mix, "split", lambda self, reqs: mixed_windows.append(len(s := split(self, reqs))) or s)
    fast = simulate(p, plan, SimOptions(scaling=scaling))
    slow = simulate(p, plan, SimOptions(scaling=scaling, method="events"))
    assert fast.dropped.any() and max(mixed_windows) == 2
    assert (fast.latency_ms.tobytes(), fast.dropped.tobytes(), fast.drop_info_ns.tobytes(), fast.stage_ms.tobytes(),
            fast.batches) == (slow.latency_ms.tobytes(), slow.dropped.tobytes(), slow.drop_info_ns.tobytes(),
                              slow.stage_ms.tobytes(), slow.batches)
