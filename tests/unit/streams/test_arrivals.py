"""slipstream.streams.arrivals: the one reader of arrival files and the two peak rates, which differ on purpose."""
import numpy as np
import pytest

from slipstream.streams.arrivals import (ArrivalsError, gamma_arrivals, peak_rate_binned, peak_rate_sliding, poisson_arrivals,
                              read_arrivals)


def test_a_burst_across_a_bin_edge_counts_whole_only_in_the_sliding_peak():
    a = np.array([0.1, 0.9, 0.95, 1.05, 1.1, 2.5])
    assert peak_rate_sliding(a, 1.0) == pytest.approx(4.0)  # [0.9, 1.9) holds four
    assert peak_rate_binned(a, 1.0) == pytest.approx(3.0)  # [0, 1) holds three, [1, 2) two


def test_the_sliding_peak_is_never_below_the_binned_one():
    rng = np.random.default_rng(1)
    for seed in range(5):
        a = gamma_arrivals(30.0, 4.0, 60.0, np.random.default_rng(seed))
        w = float(rng.uniform(0.1, 5.0))
        assert peak_rate_sliding(a, w) >= peak_rate_binned(a, w) - 1e-9


def test_poisson_takes_a_seed_or_a_generator_and_rate_zero_has_no_arrivals():
    assert np.array_equal(poisson_arrivals(20.0, 10.0, 3), poisson_arrivals(20.0, 10.0, np.random.default_rng(3)))
    assert poisson_arrivals(0.0, 10.0, 3).size == 0
    with pytest.raises(ArrivalsError, match="rate"):
        gamma_arrivals(0.0, 1.0, 10.0, np.random.default_rng(0))


def test_read_arrivals_reads_text_and_npy_sorted(tmp_path):
    text = tmp_path / "a.txt"
    text.write_text("# seconds\n0.5, 0.1\n\n2.0 1.5  # two on a line\n")
    assert read_arrivals(text).tolist() == [0.1, 0.5, 1.5, 2.0]
    npy = tmp_path / "a.npy"
    np.save(npy, np.array([3.0, 1.0, 2.0]))
    assert read_arrivals(npy).tolist() == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("body, match", [("0.1\nabc\n", r"a\.txt:2: expected a time in seconds, got 'abc'"),
                                         ("0.1\n-1\n", r"a\.txt:2: .*>= 0, got -1"),
                                         ("inf\n", r"a\.txt:1: .*finite")])
def test_a_bad_arrival_file_is_an_error_naming_the_line(tmp_path, body, match):
    f = tmp_path / "a.txt"
    f.write_text(body)
    with pytest.raises(ArrivalsError, match=match):
        read_arrivals(f)
