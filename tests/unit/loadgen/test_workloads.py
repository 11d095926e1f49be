"""Workload generators: promised statistics for fixed seeds, rescaling keeps the rate curve's shape."""
import numpy as np
import pytest

from slipstream.loadgen import workloads as w
from slipstream.streams import arrivals


def rng(seed=0):
    return np.random.default_rng(seed)


@pytest.mark.parametrize("cv2", [1.0, 4.0])
def test_gamma_mean_rate_and_cv2(cv2):
    a = arrivals.gamma_arrivals(100.0, cv2, 1000.0, rng(1))
    rate, measured_cv2 = w.inter_arrival_stats(a)
    assert rate == pytest.approx(100.0, rel=0.03)
    assert measured_cv2 == pytest.approx(cv2, rel=0.08)
    assert a.min() >= 0 and a.max() < 1000.0 and np.all(np.diff(a) >= 0)


def test_bursty_gamma_has_more_variable_per_second_counts_than_poisson():
    calm = arrivals.rate_series(arrivals.gamma_arrivals(50.0, 1.0, 600.0, rng(2)))
    bursty = arrivals.rate_series(arrivals.gamma_arrivals(50.0, 4.0, 600.0, rng(2)))
    # Poisson counts: variance ~ mean; gamma CV^2=4 counts: index of dispersion ~ 4
    assert calm.var() / calm.mean() == pytest.approx(1.0, abs=0.25)
    assert bursty.var() / bursty.mean() > 2.5


def test_same_seed_same_trace_other_seed_other_trace():
    a = arrivals.gamma_arrivals(20.0, 4.0, 30.0, rng(7))
    assert np.array_equal(a, arrivals.gamma_arrivals(20.0, 4.0, 30.0, rng(7)))
    assert not np.array_equal(a, arrivals.gamma_arrivals(20.0, 4.0, 30.0, rng(8)))


def test_transition_weights_run_from_zero_to_one():
    for shape in w.SHAPES:
        ws = w.transition_weight(np.linspace(-0.5, 1.5, 201), shape)
        assert ws[0] == 0.0 and ws[-1] == pytest.approx(1.0)
        assert np.all(np.diff(ws) >= -1e-12)
        assert float(w.transition_weight(0.5, shape)) == pytest.approx(0.5)
    # the sigmoid is flatter at the ends than the line
    assert float(w.transition_weight(0.1, "sigmoid")) < 0.1
    with pytest.raises(ValueError, match="shape"):
        w.transition_weight(0.5, "cubic")


def test_step_process_rates_per_phase():
    phases = [w.Phase(20.0, 1.0, 100.0), w.Phase(80.0, 1.0)]
    a = w.varying_arrivals(phases, 200.0, rng(3))
    before, after = a[a < 100.0], a[a >= 100.0]
    assert len(before) / 100.0 == pytest.approx(20.0, rel=0.1)
    assert len(after) / 100.0 == pytest.approx(80.0, rel=0.06)


def test_transition_moves_rate_and_cv2_gradually():
    phases = [w.Phase(20.0, 1.0, 50.0), w.Phase(100.0, 4.0, np.inf)]
    rate, cv2 = w.phase_profile(phases, 20.0, "linear", np.array([0.0, 50.0, 60.0, 70.0, 90.0]))
    assert rate.tolist() == pytest.approx([20.0, 20.0, 60.0, 100.0, 100.0])
    assert cv2.tolist() == pytest.approx([1.0, 1.0, 2.5, 4.0, 4.0])
    # the scalar profile used by the generator agrees with the vectorised one
    for shape in w.SHAPES:
        for t in (0.0, 49.0, 55.5, 63.0, 69.9, 80.0):
            r, c = w.phase_profile(phases, 20.0, shape, t)
            assert w._profile_at(phases, 20.0, shape, t) == pytest.approx((float(r), float(c)))
    a = w.varying_arrivals(phases, 150.0, rng(4), transition_s=20.0, shape="sigmoid")
    mid = np.sum((a >= 58.0) & (a < 62.0)) / 4.0  # around the middle of the transition: ~60 qps
    assert 35.0 < mid < 90.0
    _, late_cv2 = w.inter_arrival_stats(a[a > 80.0])
    assert late_cv2 == pytest.approx(4.0, rel=0.25)


def test_varying_rejects_bad_phases():
    with pytest.raises(ValueError, match="increase"):
        w.varying_arrivals([w.Phase(1, 1, 10), w.Phase(2, 1, 5), w.Phase(3)], 20, rng())
    with pytest.raises(ValueError, match="rate"):
        w.varying_arrivals([w.Phase(0.0)], 20, rng())


def test_counts_uniform_keeps_exact_counts_per_bin():
    counts = np.array([3, 0, 7, 1, 12])
    a = w.counts_to_arrivals(counts, 60.0, rng(5), spread="uniform")
    assert np.bincount((a // 60).astype(int), minlength=5).tolist() == counts.tolist()
    assert np.all(np.diff(a) >= 0)


def test_counts_even_is_deterministic_and_poisson_keeps_the_mean():
    e1 = w.counts_to_arrivals([2, 4], 1.0, rng(1), spread="even")
    assert e1.tolist() == pytest.approx([0.25, 0.75, 1.125, 1.375, 1.625, 1.875])
    p = w.counts_to_arrivals(np.full(2000, 10.0), 1.0, rng(6), spread="poisson")
    per_bin = np.bincount(p.astype(int), minlength=2000)
    assert per_bin.mean() == pytest.approx(10.0, rel=0.03)
    assert per_bin.var() == pytest.approx(10.0, rel=0.15)


def test_fractional_counts_round_stochastically_to_the_expected_total():
    a = w.counts_to_arrivals(np.full(10_000, 0.25), 1.0, rng(2), spread="uniform")
    assert len(a) == pytest.approx(2500, rel=0.05)


@pytest.mark.parametrize("factor", [0.4, 1.0, 2.5])
def test_scale_rate_keeps_shape_and_duration(factor):
    base = w.varying_arrivals([w.Phase(20.0, 1.0, 60.0), w.Phase(80.0, 1.0, 120.0), w.Phase(40.0)],
                              180.0, rng(9), transition_s=10.0)
    scaled = w.scale_rate(base, factor, rng(10))
    assert len(scaled) / len(base) == pytest.approx(factor, rel=0.05)
    assert np.all(np.diff(scaled) >= 0) and scaled.max() <= base.max()
    # the 10-second rate curve keeps its shape: proportional to the original
    orig = arrivals.rate_series(base, 10.0, 180.0)
    new = arrivals.rate_series(scaled, 10.0, 180.0)
    assert np.corrcoef(orig, new)[0, 1] > 0.97
    assert new / factor == pytest.approx(orig, rel=0.25)


def test_rescale_to_peak_and_compress_and_slice():
    base = arrivals.gamma_arrivals(30.0, 1.0, 120.0, rng(11))
    scaled = w.rescale_to_peak(base, 150.0, rng(12))
    assert arrivals.peak_rate_binned(scaled) == pytest.approx(150.0, rel=0.15)
    fast = w.compress(base, 2.0)
    assert fast.max() == pytest.approx(base.max() / 2) and len(fast) == len(base)
    part = w.time_slice(base, 30.0, 10.0)
    assert part.min() >= 0 and part.max() < 10.0
    assert len(part) == np.sum((base >= 30.0) & (base < 40.0))
