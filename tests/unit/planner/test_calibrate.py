"""Calibration: the fit recovers known service scales and transits from hop timings; the store keeps
versions and picks the one in force; the profile store, the problem and the estimator all use it."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from slipstream.planner.calibrate import CalibrationFitError, fit, network, service_time, summary_lines
from slipstream.planner.estimator import simulate
from slipstream.planner.plan import Assignment, Plan, StagePlan
from slipstream.planner.profiles import BatchPoint, Profile, ProfileStore, problem_from_pipeline
from slipstream.streams.profile_store import lookup
from slipstream.streams.calibration import CalibrationError, CalibrationStore
from slipstream.streams.latency import LatencyCurve
from slipstream.streams.spec import parse_pipeline
from slipstream.schemas.records import InferenceResult
from tests.control_records import result as record

MS = 1_000_000
CURVE = LatencyCurve.fit({1: 4.0, 4: 10.0})


def result_doc(i: int, *, transit_in: float, transit_between: float, scale: float, batch: int = 4,
               every_ms: int = 1000) -> dict:
    """A two-stage request whose hops took ``scale`` x the profile and the given transits (ms), as the
    dict a test may change before it becomes a record (:func:`result`)."""
    created = every_ms * MS * i
    hops, t = [], created
    for k, (stage, transit) in enumerate((("a", transit_in), ("b", transit_between))):
        received = t + int(transit * MS)
        started = received + 2 * MS
        finished = started + int(scale * CURVE.ms(batch) * MS)
        hops.append({"stage": stage, "variant": f"v{stage}", "batch_size": batch, "enqueued_ns": t,
                     "received_ns": received, "started_ns": started, "finished_ns": finished, "worker": "w"})
        t = finished
    return {"created_ns": created, "hops": hops}


def result(i: int, **kw) -> InferenceResult:
    """:func:`result_doc` as an InferenceResult."""
    return record(**result_doc(i, **kw))


CURVES = {("va", "cpu"): CURVE, ("vb", "cpu"): CURVE}
HW = {("a", "va"): "cpu", ("b", "vb"): "cpu"}


def test_fit_recovers_scale_and_transits():
    rs = [result(i, transit_in=5.0 + (i % 3), transit_between=2.0, scale=2.5) for i in range(300)]
    doc = fit(rs, CURVES, HW, source="r")
    assert doc["service"]["va@cpu"]["scale"] == pytest.approx(2.5, rel=1e-3)
    assert doc["service"]["vb@cpu"]["samples"] == 300
    assert doc["service_cv"] < 0.01
    assert doc["transit_ms"]["ingress"][0] == pytest.approx(5.0) and doc["transit_ms"]["ingress"][-1] == pytest.approx(7.0)
    assert doc["transit_ms"]["between"][100] == pytest.approx(2.0)
    assert service_time(doc).is_deterministic
    net = network(doc)
    assert net.ingress.mean_ms == pytest.approx(6.0, abs=0.05) and net.to_results.mean_ms == 0.0


def test_fit_splits_the_spread_within_a_second_from_the_pace_between_seconds():
    # 1x and 3x alternate within every second: all spread within, the pace is even
    rs = [result(i, transit_in=1, transit_between=1, scale=s, every_ms=100) for i, s in enumerate([1.0, 3.0] * 50)]
    doc = fit(rs, CURVES, HW)
    assert doc["service"]["va@cpu"]["scale"] == pytest.approx(2.0, rel=1e-3)
    assert doc["service_cv"] == pytest.approx(0.5, rel=1e-3)
    assert doc["slowdown"]["factors"] == pytest.approx([1.0] * 10, abs=0.01)
    svc = service_time(doc)
    assert svc.kind == "lognormal" and svc.slowdown == ()
    # every other second is 3x slow: all spread is pace, none within
    rs = [result(i, transit_in=1, transit_between=1, scale=1.0 + 2 * ((i // 10) % 2), every_ms=100) for i in range(100)]
    doc = fit(rs, CURVES, HW)
    assert doc["service_cv"] == pytest.approx(0.0, abs=1e-6)
    assert sorted(set(doc["slowdown"]["factors"])) == pytest.approx([0.5, 1.5], abs=0.01)
    svc = service_time(doc)
    assert svc.is_deterministic is False and svc.kind == "deterministic"



def test_fit_refuses_runs_without_receipt_times():
    rs = [result(i, transit_in=1, transit_between=1, scale=2.0) for i in range(20)]
    old = [replace(r, hops=tuple(replace(h, received_ns=0) for h in r.hops)) for r in rs]
    with pytest.raises(CalibrationFitError, match="received_ns"):
        fit(old, CURVES, HW)
    with pytest.raises(CalibrationFitError, match="no hop's variant has a profile"):
        fit(rs, {}, HW)


def test_store_keeps_versions_and_picks_the_one_in_force(tmp_path, monkeypatch):
    cs = CalibrationStore(tmp_path)
    assert cs.in_force("latest") is None
    assert [cs.save({"n": n})["version"] for n in (1, 2)] == [1, 2]
    assert cs.in_force("latest")["n"] == 2 and cs.in_force("1")["n"] == 1 and cs.in_force("off") is None
    monkeypatch.setenv("SLIPSTREAM_CALIBRATION", "v1")
    assert cs.in_force()["n"] == 1
    with pytest.raises(CalibrationError, match="expected off, latest or a version"):
        cs.in_force("newest")


PIPE = parse_pipeline({
    "name": "one", "slo_ms": 300, "hardware": {"cpu": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
    "stages": [{"name": "a", "variants": [{"name": "va", "model": "m", "accuracy": 0.7}]}]})


def test_profiles_problem_and_estimator_plan_with_the_calibration(tmp_path):
    ProfileStore(tmp_path).save(Profile("va", "cpu", {1: BatchPoint(3, 4), 4: BatchPoint(8, 10)}))
    plain = problem_from_pipeline(PIPE, ProfileStore(tmp_path), rate_qps=5, sim_seconds=20)
    CalibrationStore(tmp_path).save({"service": {"va@cpu": {"scale": 3.0, "samples": 1}}, "service_cv": 0.0,
                                     "transit_ms": {"ingress": [40.0] * 201}})
    store, va = ProfileStore(tmp_path), PIPE.stage("a").variant("va")
    assert lookup(store, va, "cpu").curve().ms(4) == pytest.approx(30.0)
    assert store.get("va", "cpu").curve().ms(4) == pytest.approx(10.0)  # the file as measured
    assert lookup(ProfileStore(tmp_path, calibration="off"), va, "cpu").curve().ms(4) == pytest.approx(10.0)
    cal = problem_from_pipeline(PIPE, store, rate_qps=5, sim_seconds=20)
    assert cal.stage("a").variant("va").latency["cpu"].ms(1) == pytest.approx(12.0)
    plan = Plan("milp", (StagePlan("a", (Assignment("va", "cpu", 1, 2),)),), feasible=True)
    p_plain, p_cal = simulate(plain, plan).p99_ms, simulate(cal, plan).p99_ms
    p_scaled = simulate(replace(cal, network=None), plan).p99_ms
    assert p_plain < 12.0 <= p_scaled  # the scaled service
    assert p_cal == pytest.approx(p_scaled + 40.0)  # plus the measured transit


def test_mean_concurrency_is_the_time_average_of_running_batches():
    from slipstream.planner.calibrate import mean_concurrency

    s, e = np.array([0, 0, 10, 100, 105]), np.array([10, 10, 20, 110, 115])
    assert mean_concurrency(s, e).tolist() == pytest.approx([2, 2, 1, 1.5, 1.5])


def test_host_fit_recovers_the_shared_cores_and_leaves_the_host_out_when_nothing_overlaps():
    from slipstream.planner.calibrate import fit_host

    rng = np.random.default_rng(1)
    k = rng.uniform(1, 3, 500)
    group = rng.integers(0, 2, 500)
    ratio = np.array([2.0, 3.0])[group] * np.maximum(1, k / 1.5) * rng.lognormal(0, 0.05, 500)
    free, scale = fit_host(ratio, k, group, cores=2.0)
    assert free == pytest.approx(1.5, abs=0.051) and scale == pytest.approx([2.0, 3.0], rel=0.05)
    doc = fit([result(i, transit_in=1, transit_between=1, scale=2.0) for i in range(50)], CURVES, HW, cores=2)
    assert doc["host"] is None  # batches never overlap: sharing explains nothing


def test_planner_service_refits_from_recent_results_against_the_profiled_curves(tmp_path):
    from slipstream.planner.service import ReplanSettings, Replanner

    ProfileStore(tmp_path).save(Profile("va", "cpu", {1: BatchPoint(3, 4), 4: BatchPoint(8, 10)}))
    CalibrationStore(tmp_path).save({"service": {"va@cpu": {"scale": 3.0, "samples": 1}}, "service_cv": 0.0,
                                     "transit_ms": {"ingress": [40.0] * 201}})
    store = ProfileStore(tmp_path)
    base = problem_from_pipeline(PIPE, store, rate_qps=5, sim_seconds=20)
    plan = Plan("milp", (StagePlan("a", (Assignment("va", "cpu", 4, 1),)),), feasible=True)
    rp = Replanner(base, "one", ReplanSettings(refit_min_batches=50), calibration=store.calibration)
    ms = 1_000_000

    def res(i: int):  # batches of 4 that took 2x the profiled 10 ms, 5 ms in transit
        t0 = i * 10**9
        return record(created_ns=t0, finished_ns=t0 + 27 * ms, hops=[
            {"stage": "a", "variant": "va", "batch_size": 4, "enqueued_ns": t0, "received_ns": t0 + 5 * ms,
             "started_ns": t0 + 7 * ms, "finished_ns": t0 + 27 * ms, "worker": "w"}])

    assert rp.refit([res(i) for i in range(49)], plan) is rp  # too few batches: unchanged
    new = rp.refit([res(i) for i in range(60)], plan)
    assert new.calibration["service"]["va@cpu"]["scale"] == pytest.approx(2.0)
    assert new.base.stage("a").variant("va").latency["cpu"].ms(4) == pytest.approx(20.0)  # 2x, not 3x2x
    assert new.base.network.ingress.mean_ms == pytest.approx(5.0)
    assert new.refit([res(i) for i in range(60)], plan).base.stage("a").variant("va").latency["cpu"].ms(4) \
        == pytest.approx(20.0)  # refitting again does not compound


def test_fit_measures_the_workers_own_time_per_batch_and_the_estimator_adds_it():
    rs = [result(i, transit_in=5.0, transit_between=2.0, scale=1.0) for i in range(50)]  # started 2 ms late
    doc = fit(rs, CURVES, HW, source="r")
    assert doc["dispatch_ms"][0] == pytest.approx(2.0) and doc["dispatch_ms"][-1] == pytest.approx(2.0)
    st = service_time(doc)
    assert st.has_dispatch and st.dispatch.mean_ms == pytest.approx(2.0)
    assert not service_time({k: v for k, v in doc.items() if k != "dispatch_ms"}).has_dispatch  # older fits


def test_dispatch_time_counts_from_the_replica_being_free_and_leaves_out_batch_timeout_waits():
    from slipstream.planner.calibrate import dispatch_ms

    def hop(stage, worker, received, started, finished):
        return {"stage": stage, "variant": "v", "batch_size": 1, "worker": worker, "enqueued_ns": 0,
                "received_ns": received * MS, "started_ns": started * MS, "finished_ns": finished * MS}

    rs = [record(hops=[hop("a", "w/0", 100, 101, 111)]),
          record(hops=[hop("a", "w/0", 105, 113, 120)]),  # arrived while w/0 ran the first: 113 - 111
          record(hops=[hop("a", "w/1", 105, 109, 120)]),  # another replica, free: 109 - 105
          record(hops=[hop("b", "x/0", 100, 130, 140)])]  # b's batch timeout is 30 ms: it may have waited for it
    assert dispatch_ms(rs).tolist() == [1.0, 2.0, 4.0, 30.0]
    assert dispatch_ms(rs, {"b": 30.0}).tolist() == [1.0, 2.0, 4.0]


def test_spread_by_duration_recovers_a_spread_that_shrinks_with_batch_length():
    from slipstream.planner.calibrate import spread_by_duration

    rng = np.random.default_rng(2)
    ms = np.repeat([4.0, 100.0], 400)
    sd = np.where(ms < 10, 0.4, 0.1)
    points = spread_by_duration(ms, np.exp(sd * rng.standard_normal(ms.size)))
    assert [p[0] for p in points] == pytest.approx([4.0, 100.0])
    assert [p[1] for p in points] == pytest.approx([np.sqrt(np.expm1(0.16)), np.sqrt(np.expm1(0.01))], rel=0.1)
    assert spread_by_duration(np.full(400, 4.0), np.ones(400)) == []  # one bin: the pooled cv says it all
    assert spread_by_duration(np.array([4.0, 100.0]), np.ones(2)) == []  # too few batches for two bins


def test_several_runs_fit_as_one_with_each_runs_hardware_and_their_pace_is_not_core_sharing():
    from slipstream.planner.calibrate import RunHops, fit_runs

    def run(scale: float, offset_s: int, overlap: bool, hw: str) -> RunHops:
        rs = [result_doc(i, transit_in=1, transit_between=1, scale=scale, every_ms=20 if overlap else 1000)
              for i in range(100)]
        for r in rs:  # far apart in time, as two runs are
            r["created_ns"] += offset_s * 10**9
            for h in r["hops"]:
                h.update({k: h[k] + offset_s * 10**9 for k in ("enqueued_ns", "received_ns", "started_ns", "finished_ns")})
                h["worker"] = f"w{offset_s}"
        return RunHops([record(**r) for r in rs], {("a", "va"): hw, ("b", "vb"): "cpu"})

    curves = {**CURVES, ("va", "gpu"): CURVE}
    # a slow run whose batches overlap, a fast one whose batches never do, on 2 free cores: no sharing
    slow, fast = run(1.5, 0, True, "cpu"), run(1.0, 10_000, False, "gpu")
    doc = fit_runs([slow, fast], curves, cores=2.0)
    assert doc["samples"]["runs"] == 2 and doc["samples"]["results"] == 200
    assert doc["service"]["va@cpu"]["scale"] == pytest.approx(1.5, rel=1e-3)
    assert doc["service"]["va@gpu"]["scale"] == pytest.approx(1.0, rel=1e-3)  # va ran on gpu in the fast run
    assert doc["host"] is None  # one scale per variant would have read the slow run's overlap as sharing


def test_a_fit_keeps_the_earlier_scales_of_variants_its_run_did_not_run(tmp_path):
    from slipstream.planner.calibrate import carried_forward, summary_lines

    earlier = CalibrationStore(tmp_path).save({"service": {"va@cpu": {"scale": 3.0, "samples": 9},
                                                           "vc@gpu": {"scale": 1.7, "samples": 9}},
                                               "service_cv": 0.0, "transit_ms": {}, "samples": {"hops": 1, "results": 1}})
    doc = carried_forward(fit([result(i, transit_in=1, transit_between=1, scale=2.0) for i in range(20)], CURVES, HW),
                          earlier)
    assert doc["service"]["va@cpu"]["scale"] == pytest.approx(2.0)  # measured again: the new value
    assert doc["service"]["vc@gpu"] == {"scale": 1.7, "samples": 9, "carried_from": "v1"}
    assert any("vc@gpu" in line and "carried from v1" in line for line in summary_lines(doc))
    assert carried_forward(doc, None) is doc


def test_the_variants_whose_pace_a_calibration_did_not_measure_are_named_with_where_it_came_from():
    from slipstream.streams.calibration import pace_sources

    doc = {"service": {"va@cpu": {"scale": 2.0, "samples": 9}, "vc@cpu": {"scale": 1.2, "samples": 9,
                                                                          "carried_from": "v3"}}}
    assert pace_sources(doc, [("va", "cpu")]) == ()  # measured by its own runs
    assert pace_sources(doc, [("vc", "cpu"), ("va", "cpu"), ("vc", "cpu")]) == ("vc@cpu carried from v3",)
    assert pace_sources(doc, [("vb", "cpu")]) == ("vb@cpu never measured (x1.60, the median of the measured)",)
    assert pace_sources(None, [("va", "cpu")]) == ("va@cpu as profiled (no calibration)",)


def test_a_variant_no_run_measured_plans_at_the_machines_scale_not_its_bare_profile(tmp_path):
    from slipstream.streams.calibration import service_scale

    two = parse_pipeline({
        "name": "two", "slo_ms": 300, "hardware": {"cpu": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
        "stages": [{"name": "a", "variants": [{"name": "va", "model": "m", "accuracy": 0.7},
                                              {"name": "vb", "model": "n", "accuracy": 0.8}]}]})
    for v in ("va", "vb"):
        ProfileStore(tmp_path).save(Profile(v, "cpu", {1: BatchPoint(3, 4), 4: BatchPoint(8, 10)}))
    doc = {"service": {"va@cpu": {"scale": 2.0, "samples": 9}, "vz@cpu": {"scale": 1.6, "samples": 9},
                       "vz@gpu": {"scale": 5.0, "samples": 9}}}
    assert service_scale(doc, "vb", "cpu") == pytest.approx(1.8)  # the median of the cpu scales
    assert service_scale(doc, "vb", "tpu") == pytest.approx(2.0)  # no tpu scale: the median of all
    assert service_scale(None, "vb", "cpu") == 1.0 and service_scale({"service": {}}, "vb", "cpu") == 1.0
    CalibrationStore(tmp_path).save({**doc, "service_cv": 0.0, "transit_ms": {}})
    shown = "\n".join(summary_lines({**doc, "service_cv": 0.0, "transit_ms": {}, "samples": {"hops": 1, "results": 1}}))
    assert "variant not run   x1.80 on cpu" in shown and "x5.00 on gpu" in shown
    store = ProfileStore(tmp_path)
    measured, unmeasured = (lookup(store, two.stage("a").variant(v), "cpu").curve().ms(4) for v in ("va", "vb"))
    assert measured == pytest.approx(20.0) and unmeasured == pytest.approx(18.0)  # not 10.0: as slow as the machine
    problem = problem_from_pipeline(two, store, rate_qps=5, sim_seconds=20)
    assert problem.stage("a").variant("vb").latency["cpu"].ms(4) == pytest.approx(18.0)
    assert lookup(ProfileStore(tmp_path, calibration="off"), two.stage("a").variant("vb"), "cpu").curve().ms(4) \
        == pytest.approx(10.0)


def test_scales_per_batch_size_where_several_sizes_ran_and_the_profile_store_applies_them(tmp_path):
    from slipstream.streams.calibration import batch_scale

    # batches of 1 took 2x the profile (a per-item cost weighs more), batches of 4 took 1x
    rs = [result(i, transit_in=1, transit_between=1, scale=2.0 if i % 2 else 1.0, batch=1 if i % 2 else 4)
          for i in range(120)]
    doc = fit(rs, CURVES, HW)
    assert doc["service"]["va@cpu"]["by_batch"] == pytest.approx({"1": 2.0, "4": 1.0}, rel=1e-3)
    assert batch_scale({"1": 2.0, "4": 1.0}, 2) == pytest.approx(1.5)  # halfway in log size
    assert batch_scale({"1": 2.0, "4": 1.0}, 16) == 1.0
    assert "by batch size" in "\n".join(summary_lines(doc))
    ProfileStore(tmp_path).save(Profile("va", "cpu", {1: BatchPoint(3, 4), 4: BatchPoint(8, 10)}))
    CalibrationStore(tmp_path).save(doc)
    curve = lookup(ProfileStore(tmp_path), PIPE.stage("a").variant("va"), "cpu").curve()
    assert curve.ms(1) == pytest.approx(8.0) and curve.ms(4) == pytest.approx(10.0)
    assert "by_batch" not in fit(rs[::2], CURVES, HW)["service"]["va@cpu"]  # one size: the one scale


def test_each_variant_gets_its_own_spread_and_the_estimator_draws_it_with_that():
    # stage a's batches alternate 1x and 3x within every second, stage b's never vary: one pooled
    # spread would give b's variant a's, which is what made the estimator over-drop unmeasured variants
    rs = [result_doc(i, transit_in=1, transit_between=1, scale=1.0, every_ms=100) for i in range(200)]
    for i, r in enumerate(rs):
        a, b = r["hops"]
        later = int((0.0 if i % 2 else 2.0) * CURVE.ms(4) * MS)
        a["finished_ns"] += later
        b.update({k: b[k] + later for k in ("enqueued_ns", "received_ns", "started_ns", "finished_ns")})
    rs = [record(**r) for r in rs]
    doc = fit(rs, CURVES, HW)
    assert doc["host"] is None and doc["slowdown"]["factors"] == pytest.approx([1.0] * 20)
    (ms_a, cv_a), = doc["service"]["va@cpu"]["cv_by_ms"]
    (ms_b, cv_b), = doc["service"]["vb@cpu"]["cv_by_ms"]
    assert cv_a == pytest.approx(np.sqrt(np.expm1(np.log(3.0 / np.sqrt(3.0)) ** 2)), rel=1e-3) and cv_b < 1e-6
    assert doc["service_cv"] > 0.3  # the pooled spread is a's and b's together
    svc = service_time(doc)
    assert svc.for_variant("va@cpu").cv_at(10.0) == pytest.approx(cv_a)
    assert svc.for_variant("vb@cpu").cv_at(10.0) == pytest.approx(0.05)  # MIN_CV: no spread below it
    assert svc.for_variant("vc@cpu") is svc  # a variant not measured: the pooled spread
    assert any("its spread" in line for line in summary_lines(doc))
    assert "cv_by_ms" not in fit(rs[:30], CURVES, HW)["service"]["va@cpu"]  # too few batches for a spread of its own


def test_a_refit_at_one_batch_size_keeps_the_scales_measured_before_at_the_others(tmp_path):
    from slipstream.planner.calibrate import carried_forward

    # measured before: batches of 1 at 2x the profile, of 4 at 1x; the new run ran batches of 1 only,
    # 10 % slower than then: its batches of 4 keep their measured shape at the new run's level
    earlier = CalibrationStore(tmp_path).save({"service": {"va@cpu": {"scale": 1.5, "samples": 120,
                                                                      "by_batch": {"1": 2.0, "4": 1.0},
                                                                      "cv_by_ms": [[9.0, 0.3], [40.0, 0.1]]}},
                                               "service_cv": 0.0, "transit_ms": {}, "samples": {"hops": 1, "results": 1}})
    new = fit([result(i, transit_in=1, transit_between=1, scale=2.2, batch=1) for i in range(60)], CURVES, HW)
    assert new["service"]["va@cpu"]["sizes"] == {"1": 60} and "by_batch" not in new["service"]["va@cpu"]
    doc = carried_forward(new, earlier)
    va = doc["service"]["va@cpu"]
    assert va["scale"] == pytest.approx(2.2, rel=1e-3)
    assert va["by_batch"] == pytest.approx({"1": 2.2, "4": 1.1}, rel=1e-3)
    assert va["by_batch_carried_from"]["sizes"] == ["4"] and va["by_batch_carried_from"]["from"] == "v1"
    assert [p[0] for p in va["cv_by_ms"]] == pytest.approx([8.8, 40.0])  # its own at 8.8 ms, the 40 ms one kept
    assert doc["service"]["vb@cpu"] == new["service"]["vb@cpu"]  # nothing measured before: as fitted
    # a run that measured both sizes again keeps its own
    both = fit([result(i, transit_in=1, transit_between=1, scale=3.0 if i % 2 else 1.5, batch=1 if i % 2 else 4)
                for i in range(120)], CURVES, HW)
    assert carried_forward(both, earlier)["service"]["va@cpu"]["by_batch"] == pytest.approx({"1": 3.0, "4": 1.5}, rel=1e-3)


def test_a_refit_keeps_the_spread_measured_before_at_batch_lengths_it_did_not_run():
    from slipstream.planner.calibrate import merged_spread

    old = {"scale": 1.0, "cv_by_ms": [[4.0, 0.4], [14.0, 0.25], [60.0, 0.1]]}
    new = {"scale": 1.1, "cv_by_ms": [[5.0, 0.45]]}  # batches of 1 only, about 5 ms
    got = merged_spread(new, old, "v2")
    assert got["cv_by_ms"] == [[5.0, 0.45], [14.0, 0.25], [60.0, 0.1]]  # 4 ms is within 2x of 5 ms: re-measured
    assert got["cv_carried_from"] == {"from": "v2", "ms": [14.0, 60.0]}
    assert merged_spread({"scale": 1.0, "cv_by_ms": [[5.0, 0.4], [60.0, 0.1]]}, old, "v2")["cv_by_ms"] == \
        [[5.0, 0.4], [60.0, 0.1]]  # the new runs spanned it all
    assert merged_spread({"scale": 1.0}, old, "v2") == {"scale": 1.0}  # too few batches for a spread: pooled


def test_a_batch_timeout_a_re_plan_shortened_is_not_taken_for_the_workers_own_time():
    from slipstream.planner.calibrate import configs_in_force, timeouts_of

    plan = {"stages": [{"stage": "a", "assignments": [{"batch_timeout_ms": 27.4}]}]}
    start = 10**12
    control = [(start - 10**9, {"stage": "a", "epoch": 50, "batch_timeout_ms": 0.0}),  # an earlier run's
               (start - 10**6, {"stage": "a", "epoch": 53, "batch_timeout_ms": 27.4}),  # in force at the start
               (start + 10**9, {"stage": "a", "replicas": 2}),  # a scaling action: no batching
               (start + 5 * 10**9, {"stage": "a", "epoch": 55, "batch_timeout_ms": 25.1}),  # a re-plan
               (start + 6 * 10**9, {"stage": "a", "epoch": 54, "batch_timeout_ms": 1.0})]  # stale: older epoch
    assert [r["epoch"] for _at, r in configs_in_force(control, start)] == [53, 55]
    assert timeouts_of(plan) == {"a": 27.4}
    assert timeouts_of(plan, configs_in_force(control, start)) == {"a": 25.1}


def test_shrunk_means_keep_well_measured_seconds_and_discount_a_thin_noisy_one():
    from slipstream.planner.calibrate import shrunk_means

    rng = np.random.default_rng(0)
    w = np.repeat(np.arange(20), 50)
    level = 1.0 + 0.3 * rng.standard_normal(20)  # seconds really differ; 50 batches each say by how much
    x = level[w] + 0.1 * rng.standard_normal(w.size)
    out = shrunk_means(w, x)
    raw = np.bincount(w, weights=x) / 50
    assert np.abs(out - raw).max() < 0.01
    # seconds that barely differ (0.02) under a noisy spread (0.3): a second of two batches, one an
    # outlier, says little, and keeps little of its raw mean of 2.0
    x = (1.0 + 0.02 * rng.standard_normal(20))[w] + 0.3 * rng.standard_normal(w.size)
    out = shrunk_means(np.concatenate([w, [20, 20]]), np.concatenate([x, [1.0, 3.0]]))
    assert abs(out[20] - 1.0) < 0.1
    assert np.ptp(shrunk_means(w, np.ones(w.size))) == 0.0  # nothing varies: every second at the mean


def test_run_pace_is_each_variants_measured_over_expected_service_by_window_with_sharing_taken_out():
    from slipstream.planner.calibrate import RunHops, run_pace
    from slipstream.planner.sim.params import HostModel

    # one request every 100 ms; its stage-b batch runs 2x its profile in second 3, else as profiled
    results = [result_doc(i, transit_in=1.0, transit_between=1.0, scale=2.0 if 3000 <= i * 100 < 4000 else 1.0,
                          every_ms=100) for i in range(60)]
    for r in results:  # stage a as profiled throughout
        a = r["hops"][0]
        a["finished_ns"] = a["started_ns"] + int(CURVE.ms(4) * MS)
    pace = run_pace(RunHops([record(**r) for r in results], HW), CURVES, None, 0)
    assert set(pace) == {"va@cpu", "vb@cpu"}
    assert pace["va@cpu"] == pytest.approx([1.0] * 6, abs=0.01)
    b = pace["vb@cpu"]
    assert b[3] > 1.8 and all(abs(v - 1.0) < 0.2 for i, v in enumerate(b) if i != 3)
    # the same batches as if two ran at once on one free core: sharing explains 2x, the pace is 1
    shared = [result_doc(i, transit_in=1.0, transit_between=1.0, scale=2.0, every_ms=100) for i in range(60)]
    for r in shared:
        r["hops"][1]["worker"] = "w2"
        r["hops"][1]["started_ns"], r["hops"][1]["finished_ns"] = r["hops"][0]["started_ns"], r["hops"][0]["finished_ns"]
        r["hops"][0]["finished_ns"] = r["hops"][0]["started_ns"] + int(2 * CURVE.ms(4) * MS)
    both = run_pace(RunHops([record(**r) for r in shared], HW), CURVES, HostModel(1.0), 0)
    assert both["vb@cpu"] == pytest.approx([1.0] * 6, abs=0.01)
