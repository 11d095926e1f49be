"""The pure end of a replay: an outcome (sends, results, control records) becomes the run's Summary."""
import numpy as np
import pytest

from slipstream.loadgen.collect import Collector
from slipstream.loadgen.replay import ReplayOutcome, summarize_outcome
from tests.control_records import result

T0 = 1_700_000_000_000_000_000
MS = 1_000_000
S = 1_000_000_000


def outcome(config_records=()):
    c = Collector("run")
    sched = T0 + np.arange(10, dtype=np.int64) * 100 * MS
    actual = sched + 1 * MS
    actual[9] = 0  # never sent (the run was interrupted)
    for i in range(9):
        rid = f"run-{i:08d}"
        c.expect(rid)
        if i < 8:  # one request still in Kafka at the end
            created = int(actual[i])
            c.offer(result(request_id=rid, created_ns=created, deadline_ns=created + 100 * MS,
                           finished_ns=created + (20 + i * 10) * MS, accuracy=0.9))
    c.offer(result(request_id="run-00000000"))  # redelivered duplicate
    c.finish_sending()
    return ReplayOutcome(c, T0, sched, actual, T0 + 5 * S, list(config_records))


def test_outcome_summary_counts_missing_duplicates_and_lag():
    s = summarize_outcome(outcome(), slo_ms=100, pipeline="p", prices={"cpu": 0.1})
    assert (s.requests, s.done, s.missing, s.duplicates) == (9, 8, 1, 1)
    assert s.attainment == pytest.approx(8 / 9)  # latencies 20..90 ms all within 100 ms
    assert s.lag.sent == 9 and s.lag.p50_ms == pytest.approx(1.0) and s.lag.kept_up
    assert s.cost_total_usd == 0.0 and not s.notes


def test_spec_defaults_price_the_run_until_a_config_is_published():
    defaults = [{"stage": "a", "replicas": 2, "hardware": "cpu", "variant": "v", "cost_per_hour": 0.0}]
    s = summarize_outcome(outcome(), slo_ms=100, pipeline="p", prices={"cpu": 0.1},
                          default_configs=defaults)
    assert s.cost_total_usd == pytest.approx(0.2 * s.duration_s / 3600)
    assert "spec defaults" in s.notes[0]
    published = [(T0, {"stage": "a", "replicas": 5, "epoch": 0, "hardware": "cpu", "variant": "v",
                       "cost_per_hour": 0.0})]
    s2 = summarize_outcome(outcome(published), slo_ms=100, pipeline="p", prices={"cpu": 0.1},
                           default_configs=defaults)
    assert s2.cost_total_usd == pytest.approx(0.5 * s2.duration_s / 3600) and not s2.notes


def test_a_run_whose_results_never_came_still_lasts_until_its_last_send():
    c = Collector("run")
    sched = T0 + np.arange(5, dtype=np.int64) * S
    for i in range(5):
        c.expect(f"run-{i:08d}")
    c.finish_sending()
    out = ReplayOutcome(c, T0, sched, sched.copy(), T0 + 30 * S)
    defaults = [{"stage": "a", "replicas": 1, "hardware": "cpu", "variant": "v", "cost_per_hour": 0.0}]
    s = summarize_outcome(out, slo_ms=100, pipeline="p", prices={"cpu": 3.6}, default_configs=defaults)
    assert s.missing == 5 and s.attainment == 0.0
    assert s.duration_s == pytest.approx(4.0) and s.cost_total_usd == pytest.approx(3.6 * 4 / 3600)
