"""Bring your own model, end to end on the real broker: the docs example
(``docs/examples/own-onnx/make_model.py``) builds an ONNX file and a pipeline spec with
``model: onnx``; a real ``slipstream worker`` process serves it with no code change, and every
request's result is the model's answer, exactly once, and its hop names the file's digest (the spec
pins it). A StageConfig pinning another digest is refused, and the worker goes on serving its file."""
from __future__ import annotations

import asyncio
import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

from slipstream.streams import admin, topics
from slipstream.streams.client import PipelineClient, make_request
from slipstream.streams.spec import load_pipeline

from slipstream.agents.executors import file_digest

from .helpers import assert_exactly_once
from .test_data_plane import publish_config
from .workers import Workers, unique_pipeline

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "own-onnx" / "make_model.py"


def example_module():
    spec = importlib.util.spec_from_file_location("own_onnx_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


async def test_a_user_onnx_file_is_served_end_to_end_by_a_worker(kafka, unique, tmp_path):
    subprocess.run([sys.executable, str(EXAMPLE), str(tmp_path / "model")], check=True, timeout=120)
    path = unique_pipeline(tmp_path / "model" / "pipeline.yaml", unique, tmp_path)
    pipe = load_pipeline(path)
    await admin.ensure_topics(kafka, topics.all_topics(pipe))
    ex = example_module()
    features = np.random.default_rng(7).normal(size=(40, 4)).astype(np.float32)
    workers = Workers(path, kafka.bootstrap)
    try:
        worker, = await asyncio.to_thread(workers.start, "score")
        async with PipelineClient(pipe, kafka) as client:
            reqs = [make_request(pipe, npy(x)) for x in features[:20]]
            await asyncio.gather(*[await client.send(r, wait=False) for r in reqs])
            results = [await client.result(r.request_id, 60) for r in reqs]
            await publish_config(kafka, pipe, "score", epoch=1, max_batch=1, digests={"tiny": "0" * 12})
            async with asyncio.timeout(30):  # the refusal is logged (the worker's output is the event)
                while not any("rejected: cannot load" in line for line in worker.lines):
                    await asyncio.sleep(0.05)
            later = [make_request(pipe, npy(x)) for x in features[20:]]
            await asyncio.gather(*[await client.send(r, wait=False) for r in later])
            reqs += later
            results += [await client.result(r.request_id, 60) for r in later]
    finally:
        workers.stop()
    pinned = yaml.safe_load(path.read_text())["stages"][0]["variants"][0]["params"]["digest"]
    assert pinned == file_digest(tmp_path / "model" / "model.onnx")
    refusal = next(line for line in worker.lines if "rejected: cannot load" in line)
    assert f"loaded model digest '{pinned}', but the StageConfig pins '000000000000'" in refusal
    for x, res in zip(features, results):
        assert res.status == "done", res.reason
        assert res.hops[0].variant == "tiny" and res.content_type == "application/json"
        assert res.hops[0].model_digest == pinned
        logits = x @ ex.W + ex.B
        probs = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
        top = json.loads(res.output)["top5"]
        assert [c for c, _ in top] == list(np.argsort(-logits))
        np.testing.assert_allclose([p for _, p in top], np.sort(probs)[::-1], atol=1e-5)
    await assert_exactly_once(kafka, pipe.name, [r.request_id for r in reqs])
