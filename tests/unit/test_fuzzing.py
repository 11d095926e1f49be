"""The fuzz cases (``tests/fuzzing.py``): each topic gets exactly the mutated records asked for,
whatever share of the draws its strategy mutates or its rules accept."""
from __future__ import annotations

from pathlib import Path

from slipstream.streams import contract
from slipstream.streams.spec import load_pipeline
from tests import fuzzing

FANOUT3 = Path(__file__).parent.parent / "integration" / "pipelines" / "fanout3.yaml"


def test_every_topic_gets_the_mutated_records_asked_for():
    pipe = load_pipeline(FANOUT3)
    d = pipe.stage("classify").defaults
    base = {"pipeline": pipe.name, "stage": "classify", "variant": d.variant, "hardware": d.hardware,
            "max_batch": d.max_batch, "batch_timeout_ms": d.batch_timeout_ms, "replicas": d.replicas,
            "partitions": d.partitions, "epoch": 1, "planner_mode": "fuzz", "predicted_p99_ms": None,
            "routing": {}, "cost_per_hour": 0.0, "reason": "fuzz", "digests": {}}
    control = fuzzing.control_cases(pipe.name, "classify", base, 40, 5, pipe)
    frags = fuzzing.cases("InferenceResult", "join", fuzzing.fragment_record(pipe.name, 1000.0),
                          contract.Bounds.of(pipe, "join", 1 << 20), 40, "u", 6)
    assert sum(c.mutated for c in control) == 40 and control[-1].mutated
    assert all(c.expect == "skipped" for c in control if c.mutated)
    assert sum(c.mutated for c in frags) == 40 and frags[-1].mutated
    ids = [c.request_id for c in frags if c.request_id is not None]
    assert len(set(ids)) == len(ids)
