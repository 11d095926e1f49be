"""The estimator against queueing theory: M/D/1, M/M/c (in-worker mode), M/D/2 vs partition queues,
processor sharing. Each case has a fixed seed and enough requests for its tolerance."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from slipstream.planner.estimator import HostModel, ServiceTime, SimOptions, simulate
from slipstream.planner.plan import Assignment
from slipstream.streams.arrivals import poisson_arrivals

from planner_builders import one_stage, single_plan

D_MS = 10.0  # one deterministic batch of 1 (mean service of the exponential cases)


def erlang_c_wait_ms(lam: float, mu: float, c: int) -> float:
    """M/M/c mean wait in queue (Erlang C)."""
    a = lam / mu
    top = a ** c / math.factorial(c) / (1 - a / c)
    p_wait = top / (sum(a ** k / math.factorial(k) for k in range(c)) + top)
    return p_wait / (c * mu - lam) * 1000


def one_stage_run(lam: float, seconds: float, replicas: int, seed: int, **changes):
    """``changes``: the problem's fields (host, service) or SimOptions' (method, scaling)."""
    arr = poisson_arrivals(lam, seconds, seed)
    p = one_stage({1: D_MS}, slo_ms=1e6, rate=lam)
    options = {k: changes.pop(k) for k in ("method", "scaling") if k in changes}
    plan = single_plan({"a": [Assignment("v", "cpu", 1, replicas, 1.0, 0.0)]})
    return simulate(replace(p, arrivals_s=arr, seed=seed, **changes), plan, SimOptions(drop_late=False, **options))


@pytest.mark.parametrize("method", ["auto", "events"])
def test_md1_mean_wait_is_pollaczek_khinchine(method):
    # M/D/1: Wq = rho D / (2 (1 - rho)); one replica, max batch 1, no drops
    lam = 70.0
    rho = lam * D_MS / 1000
    res = one_stage_run(lam, 3000, 1, seed=0, method=method)
    assert res.requests > 200_000 and res.batches == res.requests
    wait = float(np.mean(res.latency_ms)) - D_MS
    assert wait == pytest.approx(rho * D_MS / (2 * (1 - rho)), rel=0.03)


def test_mmc_in_worker_mean_wait_is_erlang_c():
    # M/M/3: three replicas on one central queue, exponential service of mean D
    lam, c = 210.0, 3
    res = one_stage_run(lam, 1500, c, seed=0, service=ServiceTime("exponential"))
    assert res.requests > 300_000
    wait = float(np.mean(res.latency_ms)) - D_MS
    assert wait == pytest.approx(erlang_c_wait_ms(lam, 1000 / D_MS, c), rel=0.03)


def test_partition_queues_wait_longer_than_the_central_queue():
    # 2 replicas at rho 0.7. in-worker: one queue, 2 servers (M/D/2; Cosmetatos' approximation is
    # within about 1 % at this load); rebalance: 4 partitions by the range assignor, so each replica
    # queues its own two partitions' items (consecutive pairs of the stream) and idles while the other
    # has a queue: measured about 1.21 x the central wait on these arrivals
    lam, c = 140.0, 2
    rho = lam * D_MS / 1000 / c
    mdc = 0.5 * (1 + (1 - rho) * (c - 1) * (math.sqrt(4 + 5 * c) - 2) / (16 * rho * c)) \
        * erlang_c_wait_ms(lam, 1000 / D_MS, c)
    central = float(np.mean(one_stage_run(lam, 1500, c, seed=0).latency_ms)) - D_MS
    partitioned = float(np.mean(one_stage_run(lam, 1500, c, seed=0, scaling="rebalance").latency_ms)) - D_MS
    assert central == pytest.approx(mdc, rel=0.05)
    assert partitioned > 1.15 * central


@pytest.mark.parametrize("service", [ServiceTime(), ServiceTime("exponential")], ids=["M/D/1-PS", "M/M/1-PS"])
def test_processor_sharing_mean_sojourn(service):
    # 64 replicas (never all busy), one core: every running batch shares it. E[T] = D / (1 - rho) for
    # any service distribution (PS is insensitive); for exponential service that is 1 / (mu - lambda)
    lam = 50.0
    res = one_stage_run(lam, 2000, 64, seed=0, host=HostModel(cores=1.0), service=service)
    assert float(np.mean(res.latency_ms)) == pytest.approx(D_MS / (1 - lam * D_MS / 1000), rel=0.03)


def ps_latencies(arr: list[float], host: HostModel) -> list[float]:
    p = one_stage({1: D_MS}, slo_ms=1e6)
    plan = single_plan({"a": [Assignment("v", "cpu", 1, 4, 1.0, 0.0)]})
    return list(simulate(replace(p, arrivals_s=np.array(arr), host=host), plan).latency_ms)


def test_processor_sharing_schedules_exactly():
    # two jobs at once on one free core take twice as long
    assert ps_latencies([0.0, 0.0], HostModel(cores=1.0)) == pytest.approx([20.0, 20.0])
    assert ps_latencies([0.0, 0.0], HostModel(cores=2.0, background_cores=1.0)) == pytest.approx([20.0, 20.0])
    # B arrives half-way through A: A alone for 5 ms, both at half speed until A's last 5 ms of work
    # are done at 15 ms (B has done 5 of its 10), B alone until 20 ms
    assert ps_latencies([0.0, 0.005], HostModel(cores=1.0)) == pytest.approx([15.0, 15.0])
    # enough free cores: no slow-down at all
    assert ps_latencies([0.0, 0.0, 0.0], HostModel(cores=3.5, background_cores=0.5)) == pytest.approx([10.0] * 3)
    # 1.5 free cores, 3 jobs: each runs at 0.5
    assert ps_latencies([0.0, 0.0, 0.0], HostModel(cores=2.0, background_cores=0.5)) == pytest.approx([20.0] * 3)
