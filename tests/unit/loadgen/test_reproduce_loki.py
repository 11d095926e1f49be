"""Loki's reproduction on a tiny synthetic chain: accuracy scaling serves more than hardware scaling
alone on the same cluster, the day's demand maps onto the capacities, and absent data skips."""
import math

import numpy as np
import pytest

from slipstream.loadgen.reproduce import loki
from slipstream.planner.problem import EdgeOption, HardwareOption, Problem, StageOption, VariantOption
from slipstream.streams.latency import LatencyCurve

SETTINGS = loki.Settings(servers=6, slo_ms=200.0, sample_s=5.0, measure_s=5.0, step_qps=10.0,
                         grid=(20, 40, 80, 160, 320), refine=3, time_limit_s=2.0)


def _variant(name: str, acc: float, fixed_ms: float, per_item_ms: float) -> VariantOption:
    return VariantOption(name, acc, {"gpu": LatencyCurve.fit({b: fixed_ms + per_item_ms * b for b in (1, 2, 4, 8)})})


def tiny_chain() -> Problem:
    """Two stages, each with an accurate slow variant and a 4x faster, less accurate one."""
    stages = tuple(StageOption(s, (_variant("slow", 0.95, 20.0, 8.0), _variant("fast", 0.8, 5.0, 2.0)))
                   for s in ("detect", "classify"))
    return Problem(slo_ms=SETTINGS.slo_ms, rate_qps=1.0, hardware={"gpu": HardwareOption("gpu", 1.0)},
                   stages=stages, edges=(EdgeOption("detect", "classify", fanout=2.0),),
                   batch_sizes=(1, 2, 4, 8), max_replicas=SETTINGS.servers, activation_s=0.0, name="tiny")


@pytest.fixture(scope="module")
def experiment():
    return loki.Experiment(tiny_chain(), SETTINGS)


def test_accuracy_scaling_serves_more_than_hardware_scaling_alone(experiment):
    hw = loki.effective_capacity(experiment, "hardware only")
    acc = loki.effective_capacity(experiment, "accuracy scaling")
    assert hw > 0
    assert acc > hw  # the fast variants exist only for accuracy scaling
    above_hw = experiment.point("accuracy scaling", acc)
    assert above_hw.feasible and above_hw.accuracy < experiment.point("hardware only", hw).accuracy
    assert not experiment.point("hardware only", acc).feasible  # beyond its capacity: the fallback plan


def test_hardware_only_keeps_the_most_accurate_variants():
    top = loki.top_only(tiny_chain())
    assert [[v.name for v in s.variants] for s in top.stages] == [["slow"], ["slow"]]


def test_points_are_planned_once_per_mode_demand_and_slo(experiment):
    a = experiment.point("hardware only", 20)
    assert experiment.point("hardware only", 20) is a
    assert experiment.point("hardware only", 20, slo_ms=300.0) is not a


def test_the_day_maps_its_quietest_block_and_its_peak_onto_the_capacities():
    shape = np.concatenate([np.full(60, 3.0), np.full(60, 9.0), np.full(60, 5.0)])
    d = loki.day_demand(shape, 3, low=40.0, peak=300.0, step=25.0)
    assert d.tolist() == [50.0, 300.0, 150.0]  # 40 and 40 + 260 / 3 = 126.7 round up to the lattice
    quiet = loki.day_demand(np.array([0.0, 1.0]), 2, low=0.0, peak=100.0, step=25.0)
    assert quiet.tolist() == [25.0, 100.0]  # never a block without demand


def test_violation_ratio_weighs_blocks_by_demand():
    pts = [loki.Point("m", 100.0, 250.0, 0.5, 1.0, 1, True), loki.Point("m", 300.0, 250.0, 1.0, 1.0, 1, True)]
    assert math.isclose(loki.violation_ratio(pts), 50.0 / 400.0)


def test_absent_data_is_skipped_not_raised(tmp_path):
    assert "no research-data" in loki.run(None, tmp_path, progress=lambda m: None).skipped
    (tmp_path / loki.LOKI).mkdir()
    got = loki.run(tmp_path, tmp_path, progress=lambda m: None)
    assert got.skipped and "runtimes_all.csv" in got.skipped and not got.rows
