"""INFaaS's model-less selection on a synthetic family (no research data): it meets the floor and
costs no more than a fixed variant; without data the experiment is skipped."""
from pathlib import Path

import numpy as np
import pytest

from slipstream.loadgen.reproduce import infaas
from slipstream.loadgen.reproduce.infaas import FAMILY, FIXED, total_cost, windowed
from slipstream.streams.arrivals import poisson_arrivals
from slipstream.planner.problem import HardwareOption, Problem, StageOption, VariantOption
from slipstream.streams.arrivals import peak_rate_sliding
from slipstream.streams.latency import LatencyCurve

FLOOR = 0.77
ACC = dict(zip(FAMILY, (0.70, 0.74, 0.7736, 0.78, 0.79)))


def synthetic(arrivals, variants, hardware):
    hw = {"cpu": HardwareOption("cpu", 0.2), "pascal": HardwareOption("pascal", 1.5, "cuda")}
    names = list(hardware or hw)
    opts = []
    for v in variants:
        scale = 1 + FAMILY.index(v)  # bigger models are slower everywhere
        curves = {"cpu": LatencyCurve.fit({1: 25 * scale, 2: 50 * scale}),
                  "pascal": LatencyCurve.fit({1: 8 * scale, 2: 10 * scale, 4: 14 * scale})}
        opts.append(VariantOption(v, ACC[v], {h: curves[h] for h in names}))
    return Problem(slo_ms=300.0, rate_qps=max(peak_rate_sliding(arrivals, 1.0), 1.0), hardware={h: hw[h] for h in names},
                   stages=(StageOption("classify", tuple(opts)),), arrivals_s=arrivals, accuracy_floor=FLOOR,
                   batch_sizes=(1, 2, 4), name="tiny")


@pytest.fixture(scope="module")
def windows():
    arr = np.concatenate([poisson_arrivals(3.0, 10.0, np.random.default_rng(1)),
                          10.0 + poisson_arrivals(60.0, 10.0, np.random.default_rng(2))])
    return windowed(synthetic, "varying", arr, window_s=10.0, progress=lambda _: None)


def test_model_less_meets_the_floor_in_every_window(windows):
    ml = [w for w in windows if w.mode == "model-less" and w.requests]
    assert len(ml) == 2 and all(w.accuracy >= FLOOR - 1e-9 for w in ml)
    assert not any(w.variant.startswith(("resnet18", "resnet34")) for w in ml)


def test_model_less_costs_no_more_than_a_fixed_variant(windows):
    cost = {m: total_cost([w for w in windows if w.mode == m]) for m in infaas.MODES}
    assert cost["model-less"] <= min(cost[m] for m in infaas.MODES if m != "model-less") + 1e-9
    assert cost["fixed-gpu-peak"] >= cost["fixed-gpu-scaled"]  # sized for the peak all along
    fixed = [w for w in windows if w.mode != "model-less" and w.requests]
    assert all(w.variant.startswith(FIXED) for w in fixed)


def test_missing_data_is_skipped_not_raised(tmp_path: Path):
    assert infaas.run(None, tmp_path, lambda _: None).skipped
    assert infaas.run(tmp_path, tmp_path, lambda _: None).skipped
