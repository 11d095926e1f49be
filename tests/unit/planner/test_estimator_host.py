"""The estimator shares the host's cores between the replicas' batches (each demanding its hardware's
threads) and the co-located processes' work of each request, so its forward prediction sees the knee
the host puts below the replicas' capacity."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from slipstream.planner.cores import host_qps
from slipstream.planner.estimator import HostModel, simulate
from slipstream.planner.plan import Assignment
from slipstream.planner.problem import parse_problem
from slipstream.streams.arrivals import poisson_arrivals

from planner_builders import single_plan

D_MS = 10.0


def problem(threads: int = 1, kind: str = "cpu", rate: float = 10.0, slo_ms: float = 1e6):
    return parse_problem({"slo_ms": slo_ms, "arrival": {"rate_qps": rate, "sim_seconds": 10},
                          "hardware": {"h": {"cost_per_hour": 1.0, "threads": threads, "kind": kind}},
                          "stages": [{"name": "a", "variants": [{"name": "v", "latency_ms": {"h": {"1": D_MS}}}]}]})


def latencies(arr: list[float], host: HostModel, threads: int = 1, kind: str = "cpu") -> list[float]:
    plan = single_plan({"a": [Assignment("v", "h", 1, 4, 1.0, 0.0)]})
    return list(simulate(replace(problem(threads, kind), arrivals_s=np.array(arr), host=host), plan).latency_ms)


def test_a_batch_demands_its_hardware_s_threads():
    # two batches at once on 2 cores: side by side on one thread each, at half speed on two each
    assert latencies([0.0, 0.0], HostModel(2.0)) == pytest.approx([10.0, 10.0])
    assert latencies([0.0, 0.0], HostModel(2.0), threads=2) == pytest.approx([20.0, 20.0])
    assert latencies([0.0], HostModel(2.0), threads=2) == pytest.approx([10.0])  # alone: as profiled
    # an accelerator's batches run beside the host's cores
    assert latencies([0.0, 0.0], HostModel(1.0), kind="cuda") == pytest.approx([10.0, 10.0])


def test_each_request_s_co_located_work_shares_the_cores():
    # 1 core: the request's 10 ms of broker and load-generator work runs beside its batch at half speed
    assert latencies([0.0], HostModel(1.0, 0.0, 10.0)) == pytest.approx([20.0])
    # 4 ms of it: both at half speed for 8 ms, the batch's last 6 ms alone
    assert latencies([0.0], HostModel(1.0, 0.0, 4.0)) == pytest.approx([14.0])
    assert latencies([0.0], HostModel(2.0, 0.0, 10.0)) == pytest.approx([10.0])  # a core each


def test_a_window_s_own_work_is_paid_once_however_many_requests_it_holds():
    # 1 core, a 4-item batch of 10 ms: 4 ms of the worker's own work per window runs beside it once
    # (both at half speed for 8 ms, the batch's last 6 ms alone); 4 ms per request would run four
    # times (five pieces at a fifth of the core for 20 ms, the batch's last 6 ms alone)
    p = parse_problem({"slo_ms": 1e6, "arrival": {"rate_qps": 10.0, "sim_seconds": 10},
                       "hardware": {"h": {"cost_per_hour": 1.0}},
                       "stages": [{"name": "a", "variants": [{"name": "v", "latency_ms": {"h": {"1": D_MS, "4": D_MS}}}]}]})
    plan = single_plan({"a": [Assignment("v", "h", 4, 1)]})

    def run(arr: list[float], host: HostModel) -> list[float]:
        return list(simulate(replace(p, arrivals_s=np.array(arr), host=host), plan).latency_ms)

    assert run([0.0] * 4, HostModel(1.0, window_cpu_ms=4.0)) == pytest.approx([14.0] * 4)
    assert run([0.0] * 4, HostModel(1.0, request_cpu_ms=4.0)) == pytest.approx([26.0] * 4)
    assert run([0.0], HostModel(1.0, window_cpu_ms=4.0)) == pytest.approx([14.0])  # a window of one: the same
    assert run([0.0], HostModel(1.0, request_cpu_ms=4.0)) == pytest.approx([14.0])


def test_the_forward_prediction_sees_the_host_s_knee():
    # one 1-thread replica serves 100 qps; 1 core, 5 ms a request for the co-located processes: the
    # host serves 1000 / (10 + 5) = 66.7 qps. Off the host the estimator sees no knee below 100 qps.
    plan = single_plan({"a": [Assignment("v", "h", 1, 2, 1.0, 0.0)]})
    host = HostModel(1.0, 0.0, 5.0)
    assert host_qps(replace(problem(), host=host), plan) == pytest.approx(1000 / 15)

    def attainment(rate: float, on: HostModel | None) -> float:
        p = replace(problem(rate=rate, slo_ms=200.0), arrivals_s=poisson_arrivals(rate, 30.0, 1), host=on)
        return simulate(p, plan).attainment

    assert attainment(50.0, host) >= 0.99 and attainment(100.0, None) >= 0.99
    # past the knee the requests queue behind the co-located work: late, then dropped
    assert 0.99 > attainment(60.0, host) > attainment(70.0, host) > 0.8 > attainment(80.0, host)
    assert attainment(100.0, host) < 0.5


def test_a_request_refused_at_the_source_costs_the_host_nothing():
    # 1 core, 10 ms a request beyond the 10 ms batch: the host serves 50 qps, and the source gate
    # (the hand-off's drain rate) sheds about half of 100 qps from the header. The admitted requests
    # alone, with no gate, must be served exactly as beside the shed ones: a shed request costs its
    # worker about 20 us, not the per-request work of one it decodes.
    from slipstream.loadgen.simulate import published_handoff
    from slipstream.planner.estimator import SimOptions

    plan = single_plan({"a": [Assignment("v", "h", 1, 1, 1.0, 0.0)]})
    host = HostModel(1.0, 0.0, D_MS)
    offered = replace(problem(rate=100.0, slo_ms=400.0), arrivals_s=poisson_arrivals(100.0, 20.0, 3), host=host)
    gated = simulate(offered, plan, SimOptions(handoff=published_handoff(offered, plan)))
    assert 0.3 < gated.shed_share < 0.7
    admitted = ~gated.shed
    alone = simulate(replace(offered, arrivals_s=offered.arrivals_s[admitted]), plan)
    assert gated.latency_ms[admitted] == pytest.approx(alone.latency_ms, nan_ok=True)
    assert gated.attainment == pytest.approx(alone.attainment * admitted.mean())
