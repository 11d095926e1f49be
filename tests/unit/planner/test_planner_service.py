"""Forecast, the Replanner step, StageConfig records and the tuner hand-off."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from slipstream.streams.arrivals import peak_rate_sliding
from slipstream.planner.forecast import ForecastSettings, forecast_peak, interval_peaks
from slipstream.planner.service import ReplanSettings, ReplanState, Replanner, sample_for
from slipstream.loadgen.synthetic import random_problem

SCHEMA = Path(__file__).resolve().parents[3] / "schemas" / "StageConfig.avsc"


def test_forecast_uses_recent_peaks_not_the_mean():
    s = ForecastSettings(interval_s=10, lookback_intervals=3, window_s=1.0, growth=1.0)
    steady = np.arange(0, 30, 0.1)  # 10 qps
    burst = 15 + np.arange(0, 1, 0.02)  # +50 in one second, inside the middle interval
    arr = np.sort(np.concatenate([steady, burst]))
    peaks = interval_peaks(arr, 30.0, s)
    assert max(peaks) == pytest.approx(60, abs=1)
    assert forecast_peak(arr, 30.0, s) == pytest.approx(60, abs=1)
    assert forecast_peak(arr, 30.0, ForecastSettings(window_s=1.0, growth=1.2, lookback_intervals=3)) == \
        pytest.approx(72, abs=1.5)
    # once the burst is older than the lookback it is forgotten
    late = np.concatenate([arr, 30 + np.arange(0, 30, 0.1)])
    assert forecast_peak(late, 60.0, s) == pytest.approx(10, abs=1)


def test_default_forecast_leaves_bursts_shorter_than_its_window_to_the_tuner():
    """The default window is the interval (10 s): a one-second burst moves the forecast by its share
    of the window, a step that lasts the window is forecast in full."""
    d = ForecastSettings(growth=1.0, lookback_intervals=3)
    steady = np.arange(0, 30, 0.1)  # 10 qps
    spike = np.sort(np.concatenate([steady, 15 + np.arange(0, 1, 0.02)]))  # +50 in one second
    assert forecast_peak(spike, 30.0, d) == pytest.approx(15, abs=0.5)  # (100 + 50) / 10 s
    step = np.sort(np.concatenate([steady, 10 + np.arange(0, 10, 0.05)]))  # +20 qps for 10 s
    assert forecast_peak(step, 30.0, d) == pytest.approx(30, abs=0.5)
    # a history shorter than the window is counted over what it spans, not diluted
    assert forecast_peak(np.arange(0, 5, 0.01), 5.0, d) == pytest.approx(100, abs=1)


def test_sample_is_compressed_to_the_planned_rate():
    arr = np.arange(0, 60, 0.1)  # 10 qps
    s = sample_for(arr, 60.0, 20.0, 30.0, 1.0)
    assert s[0] == 0 and s.size == 300
    assert peak_rate_sliding(s, 1.0) == pytest.approx(20, rel=0.05)  # its busiest second matches the plan
    assert sample_for(arr, 60.0, 5.0, 30.0, 1.0)[-1] == pytest.approx(29.9)  # never stretched


def test_replanner_publishes_only_on_change_and_handoff_reproduces_replicas():
    base = random_problem(3, stages=2, variants=2, hardware=2, batch_sizes=(1, 2, 4), rate_qps=1, slo_ms=400)
    def envelope(arrivals, windows):  # stands in for slipstream.tuner.envelope.envelope (planner must not import tuner)
        return np.array([peak_rate_sliding(arrivals, w) for w in windows])
    rp = Replanner(base, "demo", ReplanSettings(mode="milp", validate=True, sample_s=30), envelope)
    arr = np.arange(0, 60, 1 / 40.0)
    out, st = rp.step(ReplanState(), arr, 60 * 10**9)
    assert out.changed and st.epoch == 1 and len(out.configs) == 2
    schema = json.loads(SCHEMA.read_text())
    fields = {f["name"] for f in schema["fields"]}
    for rec in out.configs:
        assert set(rec.to_dict()) == fields
        assert rec.epoch == 1 and rec.pipeline == "demo" and rec.replicas <= rec.partitions
    h = out.handoff
    for stage, reps in h.replicas.items():
        k = h.planned_rate_qps * h.visit_ratio[stage] / (h.mu_qps[stage] * h.rho[stage])
        assert math.ceil(k - 1e-9) == reps
    assert h.windows_s[0] > 0 and h.windows_s[-1] <= 60
    assert len(h.sample_rates) == len(h.windows_s) and h.sample_rates[0] >= h.sample_rates[-1]
    # same traffic a little later: same plan, nothing to publish
    out2, st2 = rp.step(st, arr + 0.0, 60 * 10**9)
    assert not out2.changed and out2.configs == () and st2.epoch == 1
    # traffic triples: a new plan with more replicas, next epoch
    arr3 = np.arange(0, 60, 1 / 120.0)
    out3, st3 = rp.step(st2, arr3, 60 * 10**9)
    assert out3.changed and st3.epoch == 2
    assert sum(r.replicas for r in out3.configs) > sum(r.replicas for r in out.configs)


def test_explain_runner_up_is_for_the_problem_the_plan_was_made_for():
    """The service's base problem is a placeholder (rate 1); the runner-up must be sized for the
    forecast rate and sample the plan was made for, even for a plan that does not carry its rate."""
    from dataclasses import replace

    base = random_problem(3, stages=2, variants=3, hardware=2, batch_sizes=(1, 2, 4), rate_qps=1, slo_ms=400)
    rp = Replanner(base, "demo", ReplanSettings(mode="milp", validate=False, sample_s=30))
    out, _ = rp.step(ReplanState(), np.arange(0, 60, 1 / 40.0), 60 * 10**9)
    assert out.problem.rate_qps == out.forecast_qps > 40 and out.problem.arrivals_s.size > 0
    runner = rp.runner_up(replace(out, plan=replace(out.plan, rate_qps=0.0)))  # e.g. a plan read back from a file
    assert runner.feasible and runner.rate_qps == out.forecast_qps
    assert runner.key() != out.plan.key() and runner.cost_per_hour >= out.plan.cost_per_hour
    assert rp.runner_up(replace(out, plan=replace(out.plan, feasible=False))) is None


def test_a_huge_epoch_read_from_the_topic_never_overflows_the_next_plan():
    """An epoch of 2^63-1 (valid Avro) once made ``epoch + 1`` unencodable, and the planner crash-looped;
    the written epoch is ``slipstream.streams.control_rules.next_epoch``, clamped, and every config encodes."""
    from slipstream.streams import codec
    from slipstream.streams.control_rules import EPOCH_MAX

    base = random_problem(3, stages=2, variants=2, hardware=2, batch_sizes=(1, 2, 4), rate_qps=1, slo_ms=400)
    rp = Replanner(base, "demo", ReplanSettings(mode="milp", validate=False, sample_s=30))
    out, st = rp.step(ReplanState(epoch=2**63 - 1), np.arange(0, 60, 1 / 40.0), 60 * 10**9)
    assert out.changed and st.epoch == EPOCH_MAX
    for rec in out.configs:
        assert codec.decode("StageConfig", codec.encode("StageConfig", rec))["epoch"] == EPOCH_MAX


def test_a_replan_keeps_a_plan_that_still_holds_unless_the_new_one_saves_enough():
    """Each redeploy loads model replicas and resets the tuner's replicas: a plan in place that still
    meets the SLO at the forecast stays when the re-plan finds only an equally cheap other plan (the
    MILP's runner-up here: same cost, other configs), and goes when the re-plan costs >= 10 % less."""
    from dataclasses import replace

    from slipstream.planner.plan import evaluate

    base = random_problem(3, stages=2, variants=3, hardware=2, batch_sizes=(1, 2, 4), rate_qps=1, slo_ms=400)
    rp = Replanner(base, "demo", ReplanSettings(mode="milp", validate=True, sample_s=30))
    arr = np.arange(0, 60, 1 / 40.0)
    out, st = rp.step(ReplanState(), arr, 60 * 10**9)
    other = rp.runner_up(out)
    assert other.key() != out.plan.key() and other.cost_per_hour == pytest.approx(out.plan.cost_per_hour)
    kept, st2 = rp.step(replace(st, plan=other), arr + 0.0, 60 * 10**9)
    assert not kept.changed and kept.configs == () and st2.plan is other and st2.epoch == st.epoch
    doubled = evaluate(out.problem, "milp", {sp.stage: tuple(replace(a, replicas=2 * a.replicas) for a in sp.assignments)
                                            for sp in out.plan.stages}, rate_qps=out.forecast_qps)
    moved, st3 = rp.step(replace(st, plan=doubled), arr + 0.0, 60 * 10**9)
    assert moved.changed and st3.plan is moved.plan and st3.epoch == st.epoch + 1
    assert moved.plan.cost_per_hour <= 0.9 * doubled.cost_per_hour


def test_a_sample_shorter_than_one_service_time_still_has_an_envelope_window():
    from slipstream.planner.service import envelope_windows

    assert envelope_windows(40.0, 0.01) == (0.01,)  # two arrivals 10 ms apart, 40 ms of service
    assert envelope_windows(250.0, 1.0) == (0.25, 0.5, 1.0)
