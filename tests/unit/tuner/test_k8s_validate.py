"""Offline validation of everything `slipstream k8s-manifests` writes (docs/kubernetes.md, Validation):

- every Kubernetes object against the Kubernetes 1.33 OpenAPI schemas that kubernetes-validate ships
  (strict: unknown fields fail too);
- the kustomization (``--out``) rendered by kustomize (built by deploy/k8s/tools/install.sh) equals
  what is printed, object for object;
- the KafkaTopics against the schema of Strimzi's KafkaTopic CRD (npm @kubernetes-models, same script);
- the Dockerfile and .dockerignore agree with pyproject.toml and the pods' user (no Docker engine here).

The tools live in .state/k8s-tools; without them a test skips, except under CI=true where it fails.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from slipstream.commands.k8s_manifests import k8s_manifests_cmd
from tests.k8s_inputs import inputs, plan_file, render
from slipstream.k8s_pods import RUN_AS

ROOT = Path(__file__).resolve().parents[3]
TOOLS = ROOT / ".state/k8s-tools"


def _tool(path: Path) -> Path:
    if not path.exists():
        msg = f"{path.relative_to(ROOT)} missing: run deploy/k8s/tools/install.sh"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return path


def _variants(tmp_path) -> dict[str, list[dict]]:
    plan = plan_file(tmp_path, {"detect": ("cpu-4", 3), "classify": ("cpu-1", 2)})
    return {"spec defaults (a GPU stage)": render(tmp_path),
            "a plan": render(tmp_path, "--plan", str(plan), "--namespace", "ml"),
            "strimzi": render(tmp_path, "--strimzi", "events", "--strimzi-api", "v1beta2")}


def test_every_object_is_a_valid_kubernetes_object(tmp_path):
    import kubernetes_validate

    n = 0
    for docs in _variants(tmp_path).values():
        for doc in docs:
            if doc["kind"] != "KafkaTopic":  # a custom resource: Strimzi's schema, below
                kubernetes_validate.validate(doc, "1.33", strict=True)
                n += 1
    # 3 ConfigMaps, 6 Deployments, the tuner's ServiceAccount, Role, RoleBinding, the gateway's Service
    # and HorizontalPodAutoscaler
    assert n == 3 * 14
    bad = next(d for d in render(tmp_path) if d["kind"] == "Deployment")
    bad["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFileSystem"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, "1.33", strict=True)


def _key(doc):
    return doc["kind"], doc["metadata"]["name"]


def test_the_kustomization_renders_exactly_the_printed_objects(tmp_path):
    kustomize = _tool(TOOLS / "bin/kustomize")
    spec, prof = inputs(tmp_path)
    args = ["--pipeline", str(spec), "--image", "reg/slipstream:1", "--profiles", str(prof), "--strimzi", "events"]
    printed = list(yaml.safe_load_all(CliRunner().invoke(k8s_manifests_cmd, args).output))
    out = tmp_path / "k8s"
    r = CliRunner().invoke(k8s_manifests_cmd, [*args, "--out", str(out)])
    assert r.exit_code == 0, r.output
    built = subprocess.run([str(kustomize), "build", str(out)], capture_output=True, text=True, check=True).stdout
    rendered = list(yaml.safe_load_all(built))
    assert {_key(d): d for d in rendered} == {_key(d): d for d in printed} and len(rendered) == len(printed)
    # rewriting its own directory works; a directory it did not write is left alone
    assert CliRunner().invoke(k8s_manifests_cmd, [*args, "--out", str(out)]).exit_code == 0
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine/notes.txt").write_text("x")
    r = CliRunner().invoke(k8s_manifests_cmd, [*args, "--out", str(tmp_path / "mine")])
    assert r.exit_code == 1 and "not written by" in r.output


@pytest.mark.parametrize("api", ["v1", "v1beta2"])
def test_kafka_topics_are_valid_strimzi_kafka_topics(tmp_path, api):
    check = _tool(TOOLS / "strimzi/check-strimzi.mjs")
    node = shutil.which("node") or pytest.fail("node is not installed")
    topics = [d for d in render(tmp_path, "--strimzi", "events", "--strimzi-api", api) if d["kind"] == "KafkaTopic"]
    bad = json.loads(json.dumps(topics[0]))
    bad["metadata"]["name"] = "broken"
    bad["spec"]["partitions"] = 0  # the CRD's minimum is 1
    r = subprocess.run([node, str(check)], input=json.dumps([*topics, bad]), capture_output=True, text=True,
                       cwd=check.parent)
    lines = r.stdout.splitlines()
    assert lines[:-1] == [f"valid kafka.strimzi.io/{api} {t['metadata']['name']}" for t in topics], r.stderr
    assert lines[-1].startswith(f"invalid kafka.strimzi.io/{api} broken") and "partitions" in lines[-1]
    assert r.returncode == 1


def _dockerfile() -> tuple[str, dict[str, list[str]]]:
    """The Dockerfile's text and, per stage name, its instruction lines (continuations joined), those
    of the stage it is built FROM first."""
    text = (ROOT / "deploy/docker/Dockerfile").read_text()
    stages: dict[str, list[str]] = {}
    current = None
    for line in re.sub(r"\\\n\s*", " ", text).splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"FROM (\S+)(?: AS (\S+))?", line)
        if m:
            current = m.group(2)
            stages[current] = stages.get(m.group(1), [])[:]  # a stage built FROM a stage inherits it
        elif current:
            stages[current].append(line)
    return text, stages


def test_dockerfile_targets_install_the_pinned_extras_and_run_as_the_pods_user():
    _, stages = _dockerfile()
    assert {"cpu", "control", "cuda", "build-cpu", "build-control", "build-cuda"} <= set(stages)
    # the workers' image carries no solver, plotting or kubernetes client (issue 24); the control one does
    for target, extras in (("cpu", "worker"), ("control", "worker,planner,k8s"), ("cuda", "gpu")):
        build = " ".join(stages[f"build-{target}"])
        assert f"ARG EXTRAS={extras}" in build and 'pip install -c /src/constraints.txt "/src[${EXTRAS}]"' in build
        final = stages[target]
        assert f"USER {RUN_AS}:{RUN_AS}" in final and 'ENTRYPOINT ["slipstream"]' in final
        assert any(f"--uid {RUN_AS}" in line for line in final)
        assert any("SLIPSTREAM_METRICS_ADDR=0.0.0.0:9100" in line for line in final)
    assert "FROM ${CUDA_IMAGE} AS cuda-python" in _dockerfile()[0]


def test_docker_context_holds_every_package_and_nothing_else():
    """The COPY lines, the .dockerignore allow-list and pyproject's packages name the same folders."""
    _, stages = _dockerfile()
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages, mapped = setup["packages"], setup.get("package-dir", {})  # slipstream.streams.deploy: deploy/
    tops = {mapped.get(p, p).replace(".", "/").split("/")[0] for p in packages}
    copied = {line.split()[1] for line in stages["src"] if line.startswith("COPY ") and "/src/" in line.split()[-1]}
    assert copied == tops | {"pyproject.toml"}
    allowed = {line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.startswith("!")}
    assert allowed == tops | {"pyproject.toml", "constraints.txt", "README.md"}
    # every package folder is in pyproject's list: a non-editable install (the image) leaves out the rest
    found = {str(p.parent.relative_to(ROOT)).replace("/", ".") for top in tops for p in (ROOT / top).rglob("__init__.py")
             if "__pycache__" not in p.parts}
    assert found == set(packages) - set(mapped)
