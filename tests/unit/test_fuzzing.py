"""The fuzz cases (``tests/fuzzing.py``): each topic gets exactly the mutated records asked for,
whatever share of the draws its strategy mutates or its rules accept."""
from __future__ import annotations

from pathlib import Path

from slipstream.streams.spec import load_pipeline
from tests import contract_oracle as oracle, fuzzing

FANOUT3 = Path(__file__).parent.parent / "integration" / "pipelines" / "fanout3.yaml"


def test_every_topic_gets_the_mutated_records_asked_for():
    pipe = load_pipeline(FANOUT3)
    base = fuzzing.stage_config(pipe, "classify")
    control = fuzzing.control_cases(pipe.name, "classify", base, 40, 5, pipe)
    frags = fuzzing.cases("InferenceResult", "join", fuzzing.fragment_record(pipe.name, 1000.0),
                          oracle.Reader(pipe.name, pipe.slo_ms, len(pipe.stages), 1 << 20, False, 0), 40, "u", 6)
    assert sum(c.mutated for c in control) == 40 and control[-1].mutated
    assert all(c.expect == "skipped" for c in control if c.mutated)
    assert sum(c.mutated for c in frags) == 40 and frags[-1].mutated
    ids = [c.request_id for c in frags if c.request_id is not None]
    assert len(set(ids)) == len(ids)
