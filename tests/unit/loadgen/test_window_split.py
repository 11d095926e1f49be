"""The CPU a window costs its worker, from an even run against a burst run of the same requests."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from slipstream.loadgen.bench.window_split import model_ms, window_ms


class Store:
    """Profiles as the store holds them: p50 per batch size on cpu-1."""

    def __init__(self, points: dict[str, dict[int, float]]) -> None:
        self.points = points

    def get(self, variant: str, hardware: str):
        assert hardware == "cpu-1"
        return SimpleNamespace(points={b: SimpleNamespace(p50_ms=ms) for b, ms in self.points[variant].items()})


STORE = Store({"r": {1: 4.0, 2: 6.0, 4: 10.0, 8: 18.0}, "c": {1: 20.0, 8: 160.0}})  # c: no batching gain
VARIANTS = {"resize": "r", "classify": "c"}


def run(cpu_resize: float, cpu_classify: float, sizes: dict[str, dict[int, int]]) -> dict:
    return {"cpu_s": {"worker resize": cpu_resize, "worker classify": cpu_classify},
            "windows": {s: (sum(b * n for b, n in k.items()), sum(k.values()), {str(b): n for b, n in k.items()})
                        for s, k in sizes.items()}}


def test_the_model_s_time_is_interpolated_between_profiled_sizes():
    assert model_ms(STORE, "r", {1: 2, 3: 1, 8: 1}) == pytest.approx(2 * 4.0 + 8.0 + 18.0)


def test_what_fewer_windows_save_beyond_the_models_gain_is_the_window_s_cost():
    # 800 requests: windows of one, or 100 windows of 8. Resize's model saves 800 x 4 - 100 x 18 ms
    # = 1.4 s by itself, classify's nothing; 2 ms a window more saves 2 x 700 x 2 ms = 2.8 s
    even = run(10.0, 30.0, {"resize": {1: 800}, "classify": {1: 800}})
    burst = run(10.0 - 1.4 - 1.4, 30.0 - 1.4, {"resize": {8: 100}, "classify": {8: 100}})
    assert window_ms(even, burst, VARIANTS, STORE) == pytest.approx(2.0)
    # the models' gain alone: windows cost nothing
    models_only = run(10.0 - 1.4, 30.0, {"resize": {8: 100}, "classify": {8: 100}})
    assert window_ms(even, models_only, VARIANTS, STORE) == pytest.approx(0.0)
