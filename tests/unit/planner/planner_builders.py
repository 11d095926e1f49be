"""Small problems and plans for the planner tests, written out explicitly."""
from __future__ import annotations

from slipstream.planner.plan import Assignment, Plan, StagePlan
from slipstream.planner.problem import parse_problem


def one_stage(latency_ms: dict, *, slo_ms: float = 1000.0, rate: float = 10.0, seconds: float = 60.0,
              **extra):
    doc = {"slo_ms": slo_ms, "arrival": {"rate_qps": rate, "sim_seconds": seconds},
           "hardware": {"cpu": {"cost_per_hour": 1.0}},
           "stages": [{"name": "a", "variants": [{"name": "v", "accuracy": 0.9,
                                                   "latency_ms": {"cpu": {str(b): ms for b, ms in latency_ms.items()}}}]}]}
    doc.update(extra)
    return parse_problem(doc)


def single_plan(stage_assignments: dict[str, list[Assignment]], partitions: int = 4) -> Plan:
    return Plan("test", tuple(StagePlan(s, tuple(a), partitions) for s, a in stage_assignments.items()), True)


def example_problem_doc(rate_qps: float = 120, **arrival) -> dict:
    """The planning problem of docs/planner.md (and of the issue that asked for it), as JSON."""
    return {
        "slo_ms": 300, "arrival": {"rate_qps": rate_qps, **arrival},
        "hardware": {"cpu": {"cost_per_hour": 0.2}, "gpu": {"cost_per_hour": 2.5}},
        "stages": [
            {"name": "detect", "variants": [{"name": "det-s", "accuracy": 0.61,
                                             "latency_ms": {"cpu": {"1": 40, "2": 70, "4": 130},
                                                            "gpu": {"1": 6, "8": 14}}}]},
            {"name": "classify", "variants": [{"name": "cls", "accuracy": 0.8,
                                               "latency_ms": {"cpu": {"1": 10, "4": 25}}}]}],
        "edges": [{"from": "detect", "to": "classify", "fanout": 1.5, "probability": 1.0}],
    }

