"""`slipstream validate` and the checks behind it: each mistake a user makes in a pipeline spec is an
error naming the file and the field, found offline, before a worker starts; every example pipeline
passes; the committed JSON Schema is the one the model generates."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from slipstream.cli import main
from slipstream.streams.spec import json_schema

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "deploy" / "pipelines").glob("*.yaml")) + sorted(
    (ROOT / "tests" / "integration" / "pipelines").glob("*.yaml"))
GOOD = {
    "name": "shop", "slo_ms": 300,
    "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
    "stages": [
        {"name": "resize", "variants": [{"name": "r", "model": "image-resize", "accuracy": 1.0,
                                         "params": {"size": 224}}],
         "defaults": {"max_batch": 8, "partitions": 4}},
        {"name": "classify", "variants": [{"name": "lite0", "model": "efficientnet-lite0", "accuracy": 0.751}]},
    ],
    "edges": [{"from": "resize", "to": "classify"}],
}
MODEL = b"not really onnx, but a file with a digest"
MODEL_DIGEST = hashlib.sha256(MODEL).hexdigest()[:12]


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def spec_file(tmp_path: Path, mutate=None) -> Path:
    doc = json.loads(json.dumps(GOOD))
    if mutate:
        mutate(doc)
    path = tmp_path / "shop.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def onnx_variant(path: str, **params) -> dict:
    return {"name": "own", "model": "onnx", "accuracy": 0.5, "params": {"path": path, **params}}


def test_a_good_spec_validates(tmp_path):
    res = run("validate", str(spec_file(tmp_path)))
    assert res.exit_code == 0 and "ok" in res.output


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_pipeline_validates(path):
    res = run("validate", str(path))
    assert res.exit_code == 0, res.output


MISTAKES = {
    "typo key": (lambda d: d["stages"][0]["defaults"].update(max_batchs=64),
                 "stages[0].defaults.max_batchs", "did you mean 'max_batch'?"),
    "wrong top-level key": (lambda d: d.update(slo=d.pop("slo_ms")), "slo", "did you mean 'slo_ms'?"),
    "unknown model": (lambda d: d["stages"][1]["variants"][0].update(model="efficientnet-lite9"),
                      "stages[1].variants[0].model", "unknown model 'efficientnet-lite9' (did you mean"),
    "unknown param": (lambda d: d["stages"][0]["variants"][0]["params"].update(sise=260),
                      "stages[0].variants[0].params.sise", "did you mean 'size'?"),
    "missing ONNX file": (lambda d: d["stages"][1]["variants"].append(onnx_variant("no/such.onnx")),
                          "stages[1].variants[1].params.path", "no such ONNX file 'no/such.onnx'"),
    "wrong digest": (lambda d: d["stages"][1]["variants"].append(onnx_variant("model.onnx", digest="0123456789ab")),
                     "stages[1].variants[1].params.digest", f"has digest '{MODEL_DIGEST}'"),
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_each_mistake_is_an_error_naming_file_and_field(mistake, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # ONNX paths are relative to the working directory, as a worker's
    (tmp_path / "model.onnx").write_bytes(MODEL)
    mutate, where, what = MISTAKES[mistake]
    path = spec_file(tmp_path, mutate)
    res = run("validate", str(path))
    assert res.exit_code == 1
    line = next((ln for ln in res.output.splitlines() if where in ln), "")
    assert line.startswith(f"{path}: ") and what in line, res.output


def test_a_pinned_onnx_file_that_matches_validates(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.onnx").write_bytes(MODEL)
    path = spec_file(tmp_path, lambda d: d["stages"][1]["variants"].append(
        onnx_variant("model.onnx", digest=MODEL_DIGEST)))
    assert run("validate", str(path)).exit_code == 0


@pytest.mark.parametrize("command", [["worker", "--stage", "resize"], ["topics"]])
def test_commands_that_start_processes_refuse_the_spec_first(command, tmp_path):
    path = spec_file(tmp_path, MISTAKES["unknown model"][0])
    res = CliRunner().invoke(main, [command[0], "--pipeline", str(path), *command[1:]])
    assert res.exit_code == 2 and "unknown model 'efficientnet-lite9'" in res.output


def test_several_problems_are_reported_together(tmp_path):
    def two(d):
        d["stages"][0]["defaults"]["max_batchs"] = 64
        d["name"] = "Shop"
    res = run("validate", str(spec_file(tmp_path, two)))
    assert res.exit_code == 1 and "max_batchs" in res.output and "name:" in res.output


def test_the_committed_schema_is_the_generated_one():
    committed = json.loads((ROOT / "deploy" / "pipelines" / "pipeline.schema.json").read_text())
    assert committed == json_schema(), "regenerate: slipstream validate --schema > deploy/pipelines/pipeline.schema.json"
    assert json.loads(run("validate", "--schema").output) == committed


def test_the_schema_refuses_what_the_reader_refuses():
    import jsonschema

    schema = json_schema()
    jsonschema.validate(GOOD, schema)
    bad = json.loads(json.dumps(GOOD))
    bad["stages"][0]["defaults"]["max_batchs"] = 64
    with pytest.raises(jsonschema.ValidationError, match="max_batchs"):
        jsonschema.validate(bad, schema)
