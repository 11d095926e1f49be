"""Seeded synthetic planning problems for the planner benchmark and the unit tests.

Latency curves follow the shape profiled models have (IPA's quadratic fit): a fixed per-batch cost
plus a per-item cost, per variant, scaled by a per-hardware speed factor; hardware that is faster
costs more per hour. Accuracy rises with the variant's per-item cost. Nothing here is measured:
benchmarks that need measured numbers read a profile store or the published tables.
"""
from __future__ import annotations

import numpy as np

from ..planner.problem import EdgeOption, HardwareOption, Problem, StageOption, VariantOption
from ..streams.arrivals import poisson_arrivals
from ..streams.latency import LatencyCurve

HARDWARE = (("cpu-1", 0.05, 1.0), ("cpu-4", 0.17, 0.32), ("gpu", 0.9, 0.06))  # name, $/h, slowness


def random_problem(seed: int, *, stages: int = 3, variants: int = 2, hardware: int = 2,
                   batch_sizes: tuple[int, ...] = (1, 2, 4, 8), rate_qps: float = 50.0,
                   slo_ms: float = 400.0, sim_seconds: float = 60.0, chain: bool = True,
                   **overrides) -> Problem:
    rng = np.random.default_rng(seed)
    hws = {name: HardwareOption(name, price * float(rng.uniform(0.9, 1.1)))
           for name, price, _ in HARDWARE[:hardware]}
    slow = {name: s * float(rng.uniform(0.85, 1.15)) for name, _, s in HARDWARE[:hardware]}
    stage_list = []
    for i in range(stages):
        vs = []
        for j in range(variants):
            fixed = float(rng.uniform(4, 20))
            per_item = float(rng.uniform(2, 12)) * (1 + j)
            quad = float(rng.uniform(0, 0.05))
            lat = {}
            for h in hws:
                pts = {b: slow[h] * (fixed * 1.0 + per_item * b + quad * b * b) * (1 if h != "gpu" else 1)
                       for b in batch_sizes}
                if h == "gpu":  # accelerators batch well: the per-item part shrinks with batch size
                    pts = {b: slow[h] * (fixed * 8 + per_item * b ** 0.6) for b in batch_sizes}
                lat[h] = LatencyCurve.fit(pts)
            acc = float(min(0.99, 0.6 + 0.05 * j + rng.uniform(0, 0.05)))
            vs.append(VariantOption(f"v{j}", acc, lat))
        stage_list.append(StageOption(f"s{i}", tuple(vs)))
    if chain:
        edges = tuple(EdgeOption(f"s{i}", f"s{i + 1}") for i in range(stages - 1))
    else:  # a source with the rest as branches: fan-out and a conditional edge
        edges = tuple(EdgeOption("s0", f"s{i}", fanout=1.5 if i == 1 else 1.0,
                                 probability=1.0 if i == 1 else 0.6) for i in range(1, stages))
    kw = dict(slo_ms=slo_ms, rate_qps=rate_qps, hardware=hws, stages=tuple(stage_list), edges=edges,
              arrivals_s=poisson_arrivals(rate_qps, sim_seconds, seed), batch_sizes=batch_sizes,
              seed=seed, name=f"synthetic-{seed}")
    kw.update(overrides)
    return Problem(**kw)
