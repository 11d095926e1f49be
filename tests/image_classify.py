"""The planning problem of the accuracy-scaling tests (issue 40): image-classify's resize, then classify
on lite0 or lite2 (accuracies of deploy/pipelines/image-classify.yaml), on ``cpu-1`` only, at most two
replicas a stage (the 2-core host's cap), latency curves near the host's profiles."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from slipstream.planner.problem import Problem, parse_problem

CURVES = {"resize-260": {"cpu-1": {"1": 4, "2": 7, "4": 13}},
          "lite0": {"cpu-1": {"1": 15, "2": 27, "4": 52}},
          "lite2": {"cpu-1": {"1": 38, "2": 70, "4": 130}}}


def image_classify(rate_qps: float, sample_s: np.ndarray) -> Problem:
    doc = {"slo_ms": 400, "arrival": {"rate_qps": rate_qps}, "hardware": {"cpu-1": {"cost_per_hour": 0.05}},
           "hop_ms": 6.0, "activation_s": 1.0, "max_stage_replicas": 2,
           "stages": [{"name": "resize", "variants": [{"name": "resize-260", "latency_ms": CURVES["resize-260"]}]},
                      {"name": "classify", "variants": [
                          {"name": "lite0", "accuracy": 0.751, "latency_ms": CURVES["lite0"]},
                          {"name": "lite2", "accuracy": 0.776, "latency_ms": CURVES["lite2"]}]}],
           "edges": [{"from": "resize", "to": "classify"}]}
    return replace(parse_problem(doc), arrivals_s=sample_s)
