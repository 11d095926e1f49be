"""What the reproductions share: the ">2x apart" test on a paper's number and ours, number formats,
and a Problem written back as the problem JSON the CLI reads (``slipstream.planner.problem.parse_problem``), for
the experiments that run a CLI command (the tuner lives in a layer ``loadgen`` does not import)."""
from __future__ import annotations

import math
from typing import Any

from ...planner.problem import Problem

APART = 2.0  # a row whose paper and ours differ by more than this factor carries a note saying why


def apart(paper: float, ours: float) -> bool:
    """Whether ``ours`` is more than :data:`APART` times away from ``paper`` (either way); a number
    that is not positive and finite on either side counts as apart."""
    if not (paper > 0 and ours > 0 and math.isfinite(paper) and math.isfinite(ours)):
        return True
    return max(paper / ours, ours / paper) > APART


def note_if_apart(paper: float, ours: float, why: str) -> str:
    return why if apart(paper, ours) else ""


def times(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{x:.2f}x"


def pct(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{100 * x:.2f} %"


def problem_doc(problem: Problem) -> dict[str, Any]:
    """``problem`` as the problem JSON (docs/planner.md) without its arrivals (the CLI's ``--trace``
    replaces them); ``parse_problem`` reads it back into the same stages, hardware and settings."""
    return {
        "slo_ms": problem.slo_ms,
        "arrival": {"rate_qps": max(problem.rate_qps, 1e-3)},
        "hardware": {h.name: {"cost_per_hour": h.cost_per_hour, "kind": h.kind, "threads": h.threads}
                     for h in problem.hardware.values()},
        "stages": [{"name": s.name, "variants": [
            {"name": v.name, "accuracy": v.accuracy,
             "latency_ms": {h: {str(b): ms for b, ms in sorted(c.points_ms.items())} for h, c in v.latency.items()}}
            for v in s.variants]} for s in problem.stages],
        "edges": [{"from": e.src, "to": e.dst, "fanout": e.fanout, "probability": e.probability}
                  for e in problem.edges],
        "objective": problem.objective,
        **({"accuracy_floor": problem.accuracy_floor} if problem.accuracy_floor else {}),
        **({"max_replicas": problem.max_replicas} if problem.max_replicas else {}),
        "batch_sizes": list(problem.batch_sizes),
        "activation_s": problem.activation_s,
        "hop_ms": problem.hop_ms,
        "seed": problem.seed,
    }
