"""InferLine's Fig. 6 sweep on a tiny synthetic pipeline (no research data), and the skip without data."""
from pathlib import Path

import numpy as np
import pytest

from slipstream.loadgen.reproduce import inferline
from slipstream.loadgen.reproduce.inferline import Point, cost_sweep, max_saving
from slipstream.loadgen.reproduce.paper_vs_ours import apart, problem_doc
from slipstream.planner.problem import EdgeOption, HardwareOption, Problem, StageOption, VariantOption, parse_problem
from slipstream.streams.latency import LatencyCurve


def two_stage(sample: np.ndarray) -> Problem:
    """A light stage fast on the cheap cpu and a heavy one that needs the gpu: imbalance for CG to pay."""
    light = VariantOption("light", 0.9, {"cpu": LatencyCurve.fit({1: 5, 2: 9, 4: 17}),
                                         "gpu": LatencyCurve.fit({1: 4, 2: 5, 4: 7})})
    heavy = VariantOption("heavy", 0.8, {"cpu": LatencyCurve.fit({1: 90, 2: 180, 4: 360}),
                                         "gpu": LatencyCurve.fit({1: 20, 2: 26, 4: 38})})
    rate = float(np.bincount(sample.astype(int)).max()) if sample.size else 1.0
    return Problem(slo_ms=150.0, rate_qps=rate, hardware={"cpu": HardwareOption("cpu", 0.2),
                                                          "gpu": HardwareOption("gpu", 2.0, "cuda")},
                   stages=(StageOption("a", (light,)), StageOption("b", (heavy,))),
                   edges=(EdgeOption("a", "b"),), arrivals_s=sample, batch_sizes=(1, 2, 4), name="tiny")


@pytest.fixture(scope="module")
def points():
    return cost_sweep(two_stage, [40.0], [4.0], seconds=8.0, progress=lambda _: None)


def test_cg_peak_costs_at_least_the_planner(points):
    by = {p.mode: p for p in points}
    assert set(by) == set(inferline.MODES)
    assert by["cg-peak"].cost_per_hour >= by["inferline"].cost_per_hour > 0
    assert by["inferline"].attainment >= 0.95  # held-out trace, same statistics as the sample


def test_max_saving_counts_only_rates_where_the_planner_met_the_slo():
    pts = [Point(10, 1, "inferline", 1.0, 0.995, 100, True), Point(10, 1, "cg-peak", 3.0, 1.0, 90, True),
           Point(20, 1, "inferline", 1.0, 0.90, 400, True), Point(20, 1, "cg-peak", 8.0, 1.0, 90, True)]
    assert max_saving(pts, 1) == pytest.approx(3.0)
    assert np.isnan(max_saving(pts, 4))


def test_apart_is_a_factor_of_two_either_way():
    assert not apart(7.6, 4.0) and apart(7.6, 3.7) and apart(1.0, 2.1) and apart(1.0, float("nan"))


def test_problem_doc_reads_back_as_the_same_problem():
    p = two_stage(np.array([0.0, 0.5, 1.0]))
    back = parse_problem(problem_doc(p))
    assert [s.name for s in back.stages] == ["a", "b"]
    assert back.stage("b").variant("heavy").latency["gpu"].ms(4) == pytest.approx(38.0)
    assert back.hardware["gpu"].cost_per_hour == pytest.approx(2.0) and back.slo_ms == pytest.approx(150.0)


@pytest.mark.parametrize("data", [None, "empty"])
def test_missing_data_is_skipped_not_raised(tmp_path: Path, data):
    result = inferline.run(None if data is None else tmp_path, tmp_path, lambda _: None)
    assert result.skipped and not result.rows


def test_the_tuner_run_misses_less_than_the_planner_alone():
    """Fig. 11's two `slipstream simulate` runs on the tiny pipeline: the rate doubles after the sample."""
    runs = inferline.tuner_runs(two_stage(np.zeros(0)), lambda _: None,
                                trace="step:rates=20/45,at=16,transition=2,duration=40,cv2=1", timeout_s=120)
    plain, tuned = runs["planner only"], runs["planner + tuner"]
    assert plain["attainment"] < 0.95  # the sample-sized plan cannot hold the doubled rate
    assert tuned["attainment"] > plain["attainment"] + 0.05
    assert tuned["cost_total_usd"] > plain["cost_total_usd"]  # the tuner paid for replicas
    rows = inferline.tuner_rows(runs)
    assert [r.figure for r in rows] == ["Fig. 11"] * 3
