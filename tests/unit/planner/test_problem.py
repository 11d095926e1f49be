"""Problem files: parsing, defaults and errors that name the field path."""
from __future__ import annotations

import json

import numpy as np
import pytest

from slipstream.planner.problem import ProblemError, load_problem, parse_problem
from slipstream.streams.arrivals import peak_rate_sliding

from planner_builders import example_problem_doc

DOC = example_problem_doc(120)


def test_example_parses_with_rates_and_paths():
    p = parse_problem(DOC)
    assert p.rate_qps == 120 and p.source == "detect"
    assert p.visit_ratio("classify") == 1.5
    assert p.paths() == [("detect", "classify")]
    assert p.arrivals_s.size > 0  # a Poisson sample of the rate
    curve = p.stage("detect").variant("det-s").latency["gpu"]
    assert curve.ms(8) == 14 and p.batch_sizes_for(curve) == (1, 2, 4, 8)


@pytest.mark.parametrize("path, value, needle", [
    (("stages", 0, "variants", 0, "latency_ms", "tpu"), {"1": 3}, "stages[0].variants[0].latency_ms.tpu"),
    (("stages", 0, "variants", 0, "latency_ms", "cpu", "2"), -1, "stages[0].variants[0].latency_ms.cpu.2"),
    (("edges", 0, "to"), "nowhere", "edges[0].to"),
    (("slo_ms",), "fast", "slo_ms"),
    (("edges", 0, "probability"), 1.5, "edges[0].probability"),
])
def test_errors_name_the_field(path, value, needle):
    doc = json.loads(json.dumps(DOC))
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    with pytest.raises(ProblemError) as exc:
        parse_problem(doc)
    assert needle in str(exc.value)


def test_trace_file_sets_the_planning_rate_from_its_peak(tmp_path):
    arr = np.concatenate([np.arange(0, 10, 0.1), 10 + np.arange(0, 1, 0.01)])
    (tmp_path / "arrivals.txt").write_text("\n".join(f"{x:.4f}" for x in arr))
    doc = dict(DOC, arrival={"trace": "arrivals.txt"})
    (tmp_path / "p.json").write_text(json.dumps(doc))
    p = load_problem(tmp_path / "p.json")
    assert p.arrivals_s.size == arr.size
    assert p.rate_qps == pytest.approx(peak_rate_sliding(arr, 1.0)) and p.rate_qps >= 100


def test_missing_file_and_bad_json(tmp_path):
    with pytest.raises(ProblemError, match="no such problem file"):
        load_problem(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ProblemError, match="not valid JSON"):
        load_problem(tmp_path / "bad.json")


def test_an_unknown_key_is_an_error_with_a_suggestion():
    doc = json.loads(json.dumps(DOC))
    doc["arrival"]["rate_qsp"] = doc["arrival"].pop("rate_qps")
    with pytest.raises(ProblemError, match=r"arrival\.rate_qsp: unknown field \(did you mean 'rate_qps'\?\)"):
        parse_problem(doc)


def test_the_spec_and_the_problem_readers_refuse_a_wrong_edge_alike():
    """One reference check for both documents (slipstream.streams.graph.reference_error)."""
    import yaml

    from slipstream.streams.assets import deploy_dir
    from slipstream.streams.spec import SpecError, parse_pipeline

    spec = yaml.safe_load((deploy_dir() / "pipelines" / "dag-fanout.yaml").read_text())
    problem = json.loads(json.dumps(DOC))
    errors = []
    for doc, parse, error in ((spec, parse_pipeline, SpecError), (problem, parse_problem, ProblemError)):
        doc["edges"][0]["to"] = wrong = doc["stages"][1]["name"] + "x"
        with pytest.raises(error) as err:
            parse(doc)
        errors.append((str(err.value), wrong))
    for msg, wrong in errors:
        assert "edges[0].to: expected a stage name, one of" in msg
        assert "(did you mean" in msg and f"got {wrong!r}" in msg
