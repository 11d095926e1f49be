"""The scale-event figures of `slipstream bench scaling`, on hand-made runs with known answers."""
from __future__ import annotations

import math

from slipstream.loadgen.bench.scaling_stats import NS, Mark, Served, breakdown, event_cost

T = 100 * NS  # the event


def steady(replica: str, start_s: float, end_s: float, wait_ms: float, every_ms: float = 50) -> list[Served]:
    out, t = [], start_s
    while t < end_s:
        c = int(t * NS)
        out.append(Served(c, c, c + int(wait_ms * 1e6), replica, "a"))
        t += every_ms / 1000
    return out


def test_a_pause_of_the_running_replica_is_its_extra_wait():
    runs = steady("w/0", 90, 100, 5) + steady("w/0", 100, 100.5, 5 + 2000) + steady("w/0", 100.5, 110, 5)
    cost = event_cost("1 -> 2", T, runs, [], span_s=10, before_s=5)
    assert math.isclose(cost.wait_before_ms[1], 5, abs_tol=1e-6)
    assert 1990 <= cost.extra_max_ms <= 2000 and cost.extra_p99_ms > 1900


def test_no_pause_means_no_extra_wait_and_the_new_replica_is_first_serve():
    runs = steady("w/0", 90, 110, 5) + steady("w/1", 100.7, 110, 5)
    cost = event_cost("1 -> 2", T, runs, [], span_s=10, before_s=5)
    assert abs(cost.extra_p99_ms) < 1e-6 and abs(cost.extra_max_ms) < 1e-6
    assert math.isclose(cost.first_serve_s, 0.705, abs_tol=1e-3)  # created 100.7 + 5 ms wait
    assert cost.requests == len([s for s in runs if s.replica == "w/0" and s.created_ns >= T])


def test_the_previous_events_pause_is_not_this_events_normal():
    runs = steady("w/0", 90, 94, 3000) + steady("w/0", 95, 110, 5)  # a pause ended 6 s before
    cost = event_cost("2 -> 1", T, runs, [], span_s=10, before_s=5)
    assert math.isclose(cost.wait_before_ms[1], 5, abs_tol=1e-6)


def test_breakdown_of_a_rebalance_and_of_an_in_worker_change():
    ms = 1_000_000
    rebalance = [Mark("p2", "process-start", T + 600 * ms), Mark("p2", "model-loaded", T + 4000 * ms),
                 Mark("p1", "revoked", T + 1600 * ms), Mark("p1", "revoke-done", T + 1700 * ms),
                 Mark("p1", "assigned", T + 4100 * ms), Mark("p2", "assigned", T + 4200 * ms)]
    b = breakdown(rebalance, T, T + 4300 * ms)
    assert b == {"process start + imports": 600, "model load + warm-up": 3400,
                 "heartbeat wait (join/leave to revoke)": 1000, "revoke callbacks (drain, commit)": 100,
                 "join/sync": 2500, "fetch restart (until first request)": 100}
    change = [Mark("p1", "config-loaded", T + 50 * ms, {"new": "1", "load_ms": "30.0", "warm_ms": "15.0"}),
              Mark("p1", "config-in-force", T + 52 * ms)]
    assert breakdown(change, T, None) == {"model load (beside serving)": 30.0, "warm-up (beside serving)": 15.0,
                                          "window boundary": 2}
