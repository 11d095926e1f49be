"""The image runs: stage workers as containers of deploy/docker/Dockerfile's ``cpu`` target (built by
deploy/docker/build.sh; .ci/run builds it) on the host network, against the real broker, serve
requests end to end exactly once.

The model reaches the workers the way docs/kubernetes.md delivers it to a pod: a ``fetch-model``
container of the same image (the init container) fetches the file the spec names by URI into a
volume, checking the spec's sha256, and the workers mount that volume read-only. Each container is limited to one CPU
(``--cpus 1``, a cgroup CPU quota like a pod's ``limits.cpu``): asked for 2 replicas by a StageConfig,
each worker holds 1 replica, read from its cgroup, not the host's core count.

Skips only when no docker engine answers; a missing image is a failure (run deploy/docker/build.sh).
"""
from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tomllib
import urllib.request
import uuid
from pathlib import Path

import numpy as np
import pytest
import yaml

from slipstream.streams import admin, topics
from slipstream.streams.client import PipelineClient, make_request
from slipstream.streams.spec import load_pipeline

from .helpers import assert_exactly_once
from .test_data_plane import publish_config
from .test_own_onnx_model import EXAMPLE, example_module

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
IMAGE = os.environ.get("SLIPSTREAM_IMAGE", f"slipstream:{VERSION}")


def docker(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def image() -> str:
    if shutil.which("docker") is None or docker("version", timeout=20).returncode != 0:
        pytest.skip("no docker engine answers (.ci/run starts one)")
    if docker("image", "inspect", IMAGE).returncode != 0:
        pytest.fail(f"image {IMAGE} is missing: build it with deploy/docker/build.sh")
    return IMAGE


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spec_with_two_stages(model_dir: Path, name: str) -> dict:
    """The own-onnx example's spec with a relay stage in front, the model fetched to /models."""
    doc = yaml.safe_load((model_dir / "pipeline.yaml").read_text())
    doc["name"] = name
    score = doc["stages"][0]
    score["variants"][0]["params"].update(path="/models/model.onnx", uri="file:///src/model.onnx",
                                          digest=hashlib.sha256((model_dir / "model.onnx").read_bytes()).hexdigest())
    relay = {"name": "relay", "variants": [{"name": "pass", "model": "noop", "accuracy": 1.0,
                                            "params": {"content_type": "application/x-npy"}}],
             "defaults": {"variant": "pass", "hardware": "cpu-1", "max_batch": 8, "batch_timeout_ms": 2,
                          "partitions": 2}}
    doc["stages"] = [relay, score]
    doc["edges"] = [{"from": "relay", "to": "score"}]
    return doc


class Container:
    """One `slipstream worker` container; its /readyz and /metrics on a host port."""

    def __init__(self, image: str, stage: str, spec_dir: Path, models: Path, bootstrap: str) -> None:
        self.name = f"slipstream-test-{stage}-{uuid.uuid4().hex[:8]}"
        self.port = free_port()
        r = docker("run", "-d", "--rm", "--name", self.name, "--network", "host", "--cpus", "1",
                   "--read-only", "--tmpfs", "/tmp", "--tmpfs", "/home/slipstream/.cache",
                   "-e", f"SLIPSTREAM_BOOTSTRAP={bootstrap}", "-v", f"{spec_dir}:/etc/slipstream:ro",
                   "-v", f"{models}:/models:ro", image,
                   "worker", "--pipeline", "/etc/slipstream/spec.yaml", "--stage", stage,
                   "--metrics-addr", f"127.0.0.1:{self.port}")
        assert r.returncode == 0, r.stderr

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError as exc:
            return 0, str(exc)

    async def until(self, what: str, ok, timeout_s: float) -> str:
        """Poll /readyz or /metrics until ``ok(body)``; the container's log in the failure."""
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    status, body = await asyncio.to_thread(self.get, what)
                    if ok(status, body):
                        return body
                    await asyncio.sleep(0.2)
        except TimeoutError:
            pytest.fail(f"{self.name}: {what} not as expected in {timeout_s:g} s; log:\n{self.logs()}")

    @staticmethod
    def gauge(body: str, name: str) -> float | None:
        for line in body.splitlines():
            if line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return None

    def logs(self) -> str:
        r = docker("logs", "--tail", "60", self.name)
        return r.stdout + r.stderr

    def stop(self) -> None:
        docker("rm", "-f", self.name)


def npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


async def test_worker_containers_serve_requests_end_to_end(kafka, unique, tmp_path, image):
    model_dir, models = tmp_path / "model", tmp_path / "models"
    subprocess.run([sys.executable, str(EXAMPLE), str(model_dir)], check=True, timeout=120)
    doc = spec_with_two_stages(model_dir, unique)
    (model_dir / "spec.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    models.mkdir()
    os.chown(models, 10001, 10001)  # the image's user writes the fetched model (an emptyDir in a pod)
    model_dir.chmod(0o755)  # and reads the source and the spec
    for f in model_dir.iterdir():
        f.chmod(0o644)
    params = doc["stages"][1]["variants"][0]["params"]
    fetched = docker("run", "--rm", "--network", "none", "--read-only", "-v", f"{model_dir}:/src:ro",
                     "-v", f"{models}:/models", image, "fetch-model", "--uri", params["uri"],
                     "--sha256", params["digest"], "--out", params["path"], timeout=120)
    assert fetched.returncode == 0 and (models / "model.onnx").is_file(), fetched.stdout + fetched.stderr
    refused = docker("run", "--rm", "--network", "none", "--read-only", "-v", f"{model_dir}:/src:ro",
                     "-v", f"{models}:/models", image, "fetch-model", "--uri", params["uri"],
                     "--sha256", "0" * 64, "--out", "/models/other.onnx", timeout=120)
    assert refused.returncode == 1 and "not kept" in refused.stderr and not (models / "other.onnx").exists()
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({**doc, "stages": [
        {**s, "variants": [{**v, "params": {**v.get("params", {}), "path": str(models / "model.onnx")}}
                           if v["model"] == "onnx" else v for v in s["variants"]]} for s in doc["stages"]]}))
    pipe = load_pipeline(tmp_path / "spec.yaml")  # the same spec, the model path as this host sees it
    await admin.ensure_topics(kafka, topics.all_topics(pipe))
    ex = example_module()
    features = np.random.default_rng(3).normal(size=(30, 4)).astype(np.float32)
    containers = [Container(image, s, model_dir, models, kafka.bootstrap) for s in ("relay", "score")]
    try:
        for c in containers:
            await c.until("/readyz", lambda status, _: status == 200, 120)
        # 2 replicas asked; the container's cgroup allows one CPU, so its worker holds one replica
        epoch = await publish_config(kafka, pipe, "score", replicas=2)  # its offset (slipstream.streams.control_io)
        score = containers[1]
        async with PipelineClient(pipe, kafka) as client:
            reqs = [make_request(pipe, npy(x)) for x in features]
            await asyncio.gather(*[await client.send(r, wait=False) for r in reqs])
            results = [await client.result(r.request_id, 60) for r in reqs]
        body = await score.until("/metrics", lambda _, b: score.gauge(b, "slipstream_config_epoch") == epoch, 30)
        assert score.gauge(body, "slipstream_replicas") == 1.0, body[:3000]
    finally:
        for c in containers:
            c.stop()
    for x, res in zip(features, results):
        assert res.status == "done", res.reason
        assert [h.stage for h in res.hops] == ["relay", "score"]
        logits = x @ ex.W + ex.B
        assert [c for c, _ in json.loads(res.output)["top5"]] == list(np.argsort(-logits))
    await assert_exactly_once(kafka, pipe.name, [r.request_id for r in reqs])
