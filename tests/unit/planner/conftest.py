"""Fixtures of the planner tests."""
from __future__ import annotations

import pytest

from slipstream.planner.problem import parse_problem


@pytest.fixture
def toy():
    """INFaaS Tables 2/3: three ResNet50 variants. Saturation throughput is encoded as the batch a
    variant runs in its latency: B does 2 per 20 ms (100 req/s), C 12 per 15 ms (800 req/s)."""
    def make(qps: float, slo_ms: float):
        return parse_problem({
            "slo_ms": slo_ms, "arrival": {"rate_qps": qps}, "batch_sizes": [1, 2, 12], "mix": True,
            "hardware": {"cpu4": {"cost_per_hour": 1}, "inf1": {"cost_per_hour": 3}, "v100": {"cost_per_hour": 16}},
            "stages": [{"name": "classify", "variants": [
                {"name": "A", "accuracy": 0.749, "latency_ms": {"cpu4": {"1": 200}}},
                {"name": "B", "accuracy": 0.749, "latency_ms": {"inf1": {"1": 20, "2": 20}}},
                {"name": "C", "accuracy": 0.749, "latency_ms": {"v100": {"1": 15, "12": 15}}}]}]})
    return make
