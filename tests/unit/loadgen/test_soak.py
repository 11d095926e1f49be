"""The soak verdicts: RSS growth after the warm-up, lag first fifth vs last fifth."""
from __future__ import annotations

import math

from slipstream.loadgen import soak


def test_growth_compares_the_last_fifth_with_the_first_fifth_after_warm_up():
    t = [float(i) for i in range(100)]
    flat = [500.0] * 10 + [100.0] * 90  # the warm-up spike is left out
    assert soak.growth(t, flat, warmup_s=10) == 0.0
    leak = [100.0 + i for i in range(100)]
    g = soak.growth(t, leak, warmup_s=0)
    assert 0.7 < g < 0.9
    assert math.isnan(soak.growth(t, [float("nan")] * 100, warmup_s=0))


def test_rows_and_table():
    s = soak.Samples((0.0, 1.0, 2.0, 3.0, 4.0, 5.0), {"w": (10.0, 10.0, 10.0, 10.0, 11.0, 11.0)})
    (r,) = soak.rss_rows(s, warmup_s=0)
    assert (r.start_mb, r.end_mb) == (10.0, 11.0) and abs(r.growth - 0.1) < 1e-9
    (lag,) = soak.lag_rows(soak.Samples(s.t_s, {"g": (0.0, 5.0, 1.0, 0.0, 2.0, 3.0)}), warmup_s=0)
    assert (lag.max_lag, lag.first_max, lag.last_max) == (5.0, 0.0, 3.0)
    text = soak.format_tables([r], [lag], 0.99, [0.98, 1.0])
    assert "| w | 10 | 11 | +10.0 % |" in text and "attainment 99.00 %" in text
