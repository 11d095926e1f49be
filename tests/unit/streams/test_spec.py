from dataclasses import replace

import pytest

from slipstream.schemas.records import StageConfig
from slipstream.streams.control_rules import check
from slipstream.streams.spec import SpecError, parse_pipeline


def doc(**over):
    d = {
        "name": "demo", "slo_ms": 300,
        "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
        "stages": [
            {"name": "detect", "variants": [{"name": "det-s", "model": "synthetic-detector", "accuracy": 0.6}]},
            {"name": "classify", "variants": [{"name": "c-s", "model": "synthetic-mlp", "accuracy": 0.7}],
             "defaults": {"max_batch": 8, "partitions": 4, "replicas": 2}},
            {"name": "face", "variants": [{"name": "f-s", "model": "synthetic-mlp", "accuracy": 0.9}]},
        ],
        "edges": [{"from": "detect", "to": "classify", "fanout": 2.0},
                  {"from": "detect", "to": "face", "fanout": 1.5, "probability": 0.5}],
    }
    d.update(over)
    return d


def test_valid_pipeline_graph_queries():
    p = parse_pipeline(doc())
    assert p.source == "detect" and set(p.sinks) == {"classify", "face"}
    assert p.visit_ratio("classify") == 2.0 and p.visit_ratio("face") == 0.75
    assert sorted(p.paths()) == [("detect", "classify"), ("detect", "face")]
    assert p.stage("classify").defaults.max_batch == 8
    assert p.stage("detect").defaults.variant == "det-s"


def test_a_stages_defaults_are_its_stage_config_before_any_control_record():
    """One type for a stage's configuration: the spec's defaults are the StageConfig a worker starts
    with (epoch -1), and the same record at a later epoch is one the control rules accept."""
    p = parse_pipeline(doc())
    d = p.stage("classify").defaults
    assert isinstance(d, StageConfig)
    assert (d.pipeline, d.stage, d.epoch, d.max_batch, d.replicas, d.partitions) == ("demo", "classify", -1, 8, 2, 4)
    check("StageConfig", "classify", replace(d, epoch=0).to_dict(), "demo", p)  # raises InvalidControl if not


@pytest.mark.parametrize("mutate, where, what", [
    (lambda d: d.update(slo_ms=-1), "slo_ms", "a number >= 1"),
    (lambda d: d["stages"][1].update(name="Bad Name"), "stages[1].name", "lowercase"),
    (lambda d: d["stages"][0]["variants"][0].update(accuracy=1.5), "stages[0].variants[0].accuracy", "<= 1"),
    (lambda d: d["edges"][0].update(to="nowhere"), "edges[0].to", "a stage name"),
    (lambda d: d["hardware"]["cpu-1"].update(kind="tpu"), "hardware.cpu-1.kind", "'cpu' or 'cuda'"),
    (lambda d: d["stages"][1]["defaults"].update(replicas=9), "stages[1].defaults.replicas", "at most partitions"),
    (lambda d: d["edges"].append({"from": "classify", "to": "detect"}), "edges", "exactly one source"),
    (lambda d: d["stages"][0].pop("variants"), "stages[0].variants", "required field is missing"),
])
def test_errors_name_file_field_and_expectation(mutate, where, what):
    d = doc()
    mutate(d)
    with pytest.raises(SpecError) as err:
        parse_pipeline(d, source_file="pipe.yaml")
    msg = str(err.value)
    assert msg.startswith("pipe.yaml: ") and where in msg and what in msg


def test_load_pipeline_missing_file(tmp_path):
    from slipstream.streams.spec import load_pipeline
    with pytest.raises(SpecError, match="no such pipeline spec file"):
        load_pipeline(tmp_path / "nope.yaml")


def test_join_worker_only_when_requests_can_split():
    p = parse_pipeline(doc())
    assert p.needs_join and p.worker_roles({"detect": 2}) == {"detect": 2, "join": 1}
    chain = parse_pipeline(doc(edges=[{"from": "detect", "to": "classify"}, {"from": "classify", "to": "face"}]))
    assert not chain.needs_join and chain.worker_roles({"detect": 1}) == {"detect": 1}
