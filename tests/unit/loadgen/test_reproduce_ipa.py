"""IPA's reproduction on a tiny synthetic pipeline: the accuracy weight traces a monotone frontier,
no fixed-variant run beats it at equal accuracy, the SLO follows IPA's rule, and absent data skips."""
import math

import numpy as np
import pytest

from slipstream.loadgen.reproduce import ipa
from slipstream.planner.problem import EdgeOption, HardwareOption, Problem, StageOption, VariantOption
from slipstream.streams.arrivals import poisson_arrivals
from slipstream.streams.latency import LatencyCurve

SETTINGS = ipa.Settings(warm_s=20, epoch_s=20.0, weights=(0.0, 2.0, 8.0, 64.0), time_limit_s=2.0)
TOL = 1e-9


def _variant(name: str, acc: float, fixed_ms: float, per_item_ms: float) -> VariantOption:
    return VariantOption(name, acc, {"cpu": LatencyCurve.fit({b: fixed_ms + per_item_ms * b for b in (1, 2, 4, 8)})})


def tiny_pipeline() -> Problem:
    """Two stages of three variants: heavier is slower and more accurate."""
    stages = tuple(StageOption(s, (_variant("light", 0.6, 5.0, 10.0), _variant("mid", 0.75, 8.0, 25.0),
                                   _variant("heavy", 0.9, 10.0, 60.0))) for s in ("detect", "classify"))
    p = Problem(slo_ms=1.0, rate_qps=1.0, hardware={"cpu": HardwareOption("cpu", 0.17)}, stages=stages,
                edges=(EdgeOption("detect", "classify"),), batch_sizes=(1, 2, 4, 8), activation_s=0.0, name="tiny")
    from dataclasses import replace

    return replace(p, slo_ms=ipa.ipa_slo_ms(p))


@pytest.fixture(scope="module")
def runs():
    arrivals = np.sort(np.concatenate([poisson_arrivals(20.0, 60.0, 1), 60.0 + poisson_arrivals(35.0, 40.0, 2)]))
    return ipa.trade_off(tiny_pipeline(), arrivals, SETTINGS)


def test_the_slo_is_five_times_the_mean_batch_one_latency_per_stage_summed():
    # batch-1 latencies 15, 33, 70 ms per stage: 5 x 118 / 3 per stage, two stages
    assert math.isclose(tiny_pipeline().slo_ms, 2 * 5 * (15.0 + 33.0 + 70.0) / 3, rel_tol=1e-6)


def test_the_frontier_is_monotone_in_the_accuracy_weight(runs):
    frontier, _ = runs
    assert [r.weight for r in frontier] == list(SETTINGS.weights)
    for a, b in zip(frontier, frontier[1:]):
        assert b.accuracy >= a.accuracy - TOL and b.cost_usd >= a.cost_usd - TOL
    assert frontier[-1].accuracy > frontier[0].accuracy  # the weight buys accuracy at all
    assert frontier[0].normalised < frontier[-1].normalised <= 2.0 + TOL
    assert all(r.requests == frontier[0].requests > 0 for r in frontier)


def test_normalised_accuracy_is_the_rank_in_the_stage_summed(runs):
    rank = ipa.ranks(tiny_pipeline())
    assert rank[("detect", "light")] == 0.0 and rank[("detect", "mid")] == 0.5 and rank[("classify", "heavy")] == 1.0
    _, (low, high) = runs
    assert math.isclose(low.normalised, 0.0, abs_tol=TOL) and math.isclose(high.normalised, 2.0)


def test_no_fixed_variant_beats_the_milp_at_equal_accuracy(runs):
    frontier, fixed = runs
    low, high = fixed
    assert (low.label, high.label) == ("fixed lightest", "fixed heaviest")
    assert high.accuracy > low.accuracy
    for f in fixed:
        for r in frontier:
            assert not (f.accuracy >= r.accuracy - TOL and f.cost_usd < r.cost_usd - 1e-6), (f, r)
    assert ipa.dominated(low, frontier)  # the cost objective finds the lightest plan or a cheaper one


def test_dominated_needs_both_accuracy_and_cost():
    def run(acc, cost):
        return ipa.Run("r", None, cost, cost, acc, 0.0, 1.0, 1, ())
    assert ipa.dominated(run(0.5, 1.0), [run(0.5, 1.0)])
    assert not ipa.dominated(run(0.5, 1.0), [run(0.49, 0.5), run(0.6, 1.1)])


def test_the_frontier_plot_is_a_png(runs, tmp_path):
    from slipstream.loadgen.reproduce import ipa_plots

    p = ipa_plots.frontier(*runs, 300.0, tmp_path / "f.png")
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_absent_data_is_skipped_not_raised(tmp_path):
    assert "no research-data" in ipa.run(None, tmp_path, progress=lambda m: None).skipped
    got = ipa.run(tmp_path, tmp_path, progress=lambda m: None)
    assert got.skipped and "twitter_workload_per_second.tbz2" in got.skipped and not got.rows
