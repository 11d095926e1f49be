"""Models delivered from a URI named in the spec (slipstream/model_fetch.py): the sha256 check, the
fetch that keeps only a matching file, and the init containers the manifests add for them."""
from __future__ import annotations

import hashlib

import pytest
import yaml
from click.testing import CliRunner

from slipstream.cli import main as cli
from slipstream.model_fetch import check_sha256, fetch, fetched_models
from tests.k8s_inputs import SPEC, by_name, pod, render

MODEL = b"not really onnx, but bytes with a digest"
SHA = hashlib.sha256(MODEL).hexdigest()


def test_check_sha256_accepts_only_the_full_matching_digest():
    check_sha256(SHA, SHA.upper(), "m")  # hex case does not matter
    with pytest.raises(ValueError, match="not kept"):
        check_sha256(SHA, "0" * 64, "m")
    with pytest.raises(ValueError, match="64 hex digits"):
        check_sha256(SHA, SHA[:12], "m")  # a 12-digit pin is not enough to trust a download


def test_fetch_keeps_a_matching_file_and_nothing_else(tmp_path):
    src = tmp_path / "src.onnx"
    src.write_bytes(MODEL)
    out = fetch(src.as_uri(), tmp_path / "models/m.onnx", SHA)
    assert out.read_bytes() == MODEL
    with pytest.raises(ValueError, match="not kept"):
        fetch(src.as_uri(), tmp_path / "models/bad.onnx", "f" * 64)
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["m.onnx"]  # no partial file left
    r = CliRunner().invoke(cli, ["fetch-model", "--uri", src.as_uri(), "--sha256", "f" * 64,
                                 "--out", str(tmp_path / "x.onnx")])
    assert r.exit_code == 1 and "not kept" in r.output and not (tmp_path / "x.onnx").exists()


def test_fetched_models_name_the_field_that_is_wrong():
    ok = {"path": "/models/m.onnx", "uri": "https://models.example/m.onnx", "digest": SHA}
    assert fetched_models({"v": ok, "w": {"path": "/x.onnx"}}) == [("v", ok["uri"], SHA, "/models/m.onnx")]
    with pytest.raises(ValueError, match="absolute params.path"):
        fetched_models({"v": {**ok, "path": "m.onnx"}})
    with pytest.raises(ValueError, match="full sha256"):
        fetched_models({"v": {**ok, "digest": SHA[:12]}})


URI_SPEC = SPEC.replace(
    "variants: [{name: w, model: noop, accuracy: 0.8}]",
    "variants: [{name: w, model: onnx, accuracy: 0.8, params: {path: /models/w.onnx, "
    f"uri: 'https://models.example/w.onnx', digest: '{SHA}'}}}}]")


def test_a_model_named_by_uri_is_fetched_by_an_init_container_into_a_read_only_mount(tmp_path):
    import kubernetes_validate

    assert URI_SPEC != SPEC
    docs = render(tmp_path, spec=URI_SPEC)
    dep = by_name(docs)["slipstream-shop-classify"]
    kubernetes_validate.validate(dep, "1.33", strict=True)
    p = pod(dep)
    init = p["initContainers"][-1]
    assert init["args"] == ["fetch-model", "--uri", "https://models.example/w.onnx", "--sha256", SHA,
                            "--out", "/models/w.onnx"]
    assert {"name": "models-0", "mountPath": "/models"} in init["volumeMounts"]
    assert {"name": "models-0", "mountPath": "/models", "readOnly": True} in p["containers"][0]["volumeMounts"]
    assert {"name": "models-0", "emptyDir": {"sizeLimit": "8Gi"}} in p["volumes"]
    assert "initContainers" not in pod(by_name(docs)["slipstream-shop-planner"]) or all(
        c["args"][0] != "fetch-model" for c in pod(by_name(docs)["slipstream-shop-planner"])["initContainers"])
    # the init container's arguments parse with the real command
    ctx = cli.make_context("slipstream", list(init["args"]), resilient_parsing=False)
    cli.get_command(ctx, "fetch-model").make_context("fetch-model", init["args"][1:], parent=ctx)
    assert yaml.safe_load(by_name(docs, "ConfigMap")["slipstream-shop-spec"]["data"]["pipeline.yaml"])


def test_validate_accepts_a_missing_file_only_when_a_uri_and_full_sha256_deliver_it():
    from slipstream.agents.spec_check import onnx_problems

    params = {"path": "/nonexistent/w.onnx", "uri": "https://models.example/w.onnx", "digest": SHA}
    assert onnx_problems(params) == []
    assert "full sha256" in onnx_problems({**params, "digest": SHA[:12]})[0]
    assert "no such ONNX file" in onnx_problems({k: v for k, v in params.items() if k != "uri"})[0]
