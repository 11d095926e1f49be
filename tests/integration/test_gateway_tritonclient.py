"""The gateway from outside, as other Open Inference Protocol clients see it, on the real broker with a
real worker and gateway process (the cheap one-stage noop pipeline of ``test_gateway.py``):

- Triton's own client (``tritonclient`` 2.73, HTTP, and gRPC in a process of its own): liveness and
  readiness, model readiness (the served model true, another false, version 1 true, version 2 false),
  metadata, inference with JSON and binary tensors, and an input the model lacks refused with
  ``InferenceServerException``;
- every malformed or hostile request of ``tests/gateway_cases.py``: its 4xx status and the protocol's
  JSON error body, never a 5xx nor plain text;
- schemathesis, generating requests from the gateway's OpenAPI document (``gateway/openapi.yaml``),
  positive and negative, at least 500 of them: no server error among the answers, each in its
  documented form.
"""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import json
import multiprocessing
import re
import subprocess
import sys
import uuid
from pathlib import Path

import aiohttp
import numpy as np
import pytest
import yaml

from slipstream.gateway.server import GRPC_READY
from slipstream.streams import admin, topics
from slipstream.streams.spec import load_pipeline
from tests.gateway_cases import CASES

from .test_gateway import one_stage, write_spec
from .workers import Workers, start_gateway

ROOT = Path(__file__).resolve().parents[2]
SCHEMATHESIS_CASES = 500  # at least this many generated requests in all


@pytest.fixture(scope="module")
def served(kafka, tmp_path_factory):
    """One noop pipeline on the broker, its worker and a gateway with gRPC: (model, base URL, gRPC target)."""
    name = "t" + uuid.uuid4().hex[:10]
    path = write_spec(tmp_path_factory.mktemp("tritonclient"),
                      one_stage(name, 5000, {"content_type": "text/plain"}, model="noop"))
    asyncio.run(admin.ensure_topics(kafka, topics.all_topics(load_pipeline(path))))
    workers, gw = Workers(path, kafka.bootstrap), None
    try:
        workers.start("s")
        gw, url = start_gateway(path, kafka.bootstrap, "--grpc-port", "0")
        yield name, url, next(m.group(1) for m in map(GRPC_READY.search, list(gw.lines)) if m)
    finally:
        if gw is not None:
            gw.stop()
        workers.stop()


def test_tritonclient_over_http(served):
    import tritonclient.http as tc
    from tritonclient.utils import InferenceServerException

    model, url, _ = served
    c = tc.InferenceServerClient(url=url.removeprefix("http://"), connection_timeout=30, network_timeout=30)
    assert c.is_server_live() and c.is_server_ready()
    assert c.is_model_ready(model) and c.is_model_ready(model, "1")
    assert not c.is_model_ready("other") and not c.is_model_ready(model, "2")
    md = c.get_model_metadata(model)
    assert md["name"] == model and md["versions"] == ["1"] and [t["name"] for t in md["inputs"]] == ["input"]
    assert c.get_model_metadata(model, "1") == md
    with pytest.raises(InferenceServerException) as unknown:
        c.get_model_metadata(model, "2")
    assert unknown.value.status() == "404"

    text = tc.InferInput("input", [1], "BYTES")  # JSON tensors in and out
    text.set_data_from_numpy(np.array(["hello"], dtype=object), binary_data=False)
    res = c.infer(model, [text], outputs=[tc.InferRequestedOutput("output", binary_data=False)])
    assert res.as_numpy("output").tolist() == ["hello"]  # JSON data: the string as it came
    assert res.get_response()["parameters"]["status"] == "done"

    blob = bytes(range(256))  # binary tensors in and out, at version 1
    raw = tc.InferInput("input", [len(blob)], "UINT8")
    raw.set_data_from_numpy(np.frombuffer(blob, np.uint8), binary_data=True)
    res = c.infer(model, [raw], model_version="1", outputs=[tc.InferRequestedOutput("output", binary_data=True)])
    assert res.as_numpy("output").tolist() == [blob] and res.get_response()["model_version"] == "1"
    one = tc.InferInput("input", [1], "BYTES")  # one length-prefixed BYTES element
    one.set_data_from_numpy(np.array([b"\x00\x01bin"], dtype=object), binary_data=True)
    assert c.infer(model, [one]).as_numpy("output").tolist() == [b"\x00\x01bin"]

    wrong = tc.InferInput("image", [1], "BYTES")
    wrong.set_data_from_numpy(np.array(["x"], dtype=object), binary_data=False)
    with pytest.raises(InferenceServerException) as refused:
        c.infer(model, [wrong])
    assert refused.value.status() == "400" and '"image"' in refused.value.message()
    with pytest.raises(InferenceServerException) as other_version:
        c.infer(model, [text], model_version="2")
    assert other_version.value.status() == "404"
    c.close()


def test_tritonclient_over_grpc(served):
    """In a process of its own: tritonclient's generated modules register the protocol's messages
    (package ``inference``) in protobuf's default pool, where the gateway's own stubs
    (``slipstream.gateway.grpc_v2``) register the same names, and a process can hold only one of them."""
    model, _, target = served
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        failed = pool.submit(tritonclient_grpc_calls, model, target).result(timeout=120)
    assert failed is None, failed


def tritonclient_grpc_calls(model: str, target: str) -> str | None:
    """The calls, in the child process: None, or the failure's traceback (pytest's own exceptions do
    not cross a process boundary)."""
    import traceback

    try:
        grpc_calls(model, target)
    except BaseException:  # noqa: BLE001 - reported to the parent whole
        return traceback.format_exc()
    return None


def grpc_calls(model: str, target: str) -> None:
    import tritonclient.grpc as tc
    from tritonclient.utils import InferenceServerException

    c = tc.InferenceServerClient(url=target)
    assert c.is_server_live() and c.is_server_ready()
    assert c.is_model_ready(model) and c.is_model_ready(model, "1")
    assert not c.is_model_ready("other") and not c.is_model_ready(model, "2")
    md = c.get_model_metadata(model, as_json=True)
    assert md["name"] == model and md["versions"] == ["1"] and [t["name"] for t in md["inputs"]] == ["input"]

    text = tc.InferInput("input", [1], "BYTES")
    text.set_data_from_numpy(np.array([b"hello"], dtype=object))
    res = c.infer(model, [text], outputs=[tc.InferRequestedOutput("output")], client_timeout=30)
    assert res.as_numpy("output").tolist() == [b"hello"]
    assert res.get_response(as_json=True)["parameters"]["status"]["string_param"] == "done"
    blob = bytes(range(256))
    raw = tc.InferInput("input", [len(blob)], "UINT8")
    raw.set_data_from_numpy(np.frombuffer(blob, np.uint8))
    res = c.infer(model, [raw], model_version="1", client_timeout=30)
    assert res.as_numpy("output").tolist() == [blob]

    wrong = tc.InferInput("image", [1], "BYTES")
    wrong.set_data_from_numpy(np.array([b"x"], dtype=object))
    with pytest.raises(InferenceServerException) as refused:
        c.infer(model, [wrong], client_timeout=30)
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT" and '"image"' in refused.value.message()
    with pytest.raises(InferenceServerException) as other_version:
        c.infer(model, [text], model_version="2", client_timeout=30)
    assert other_version.value.status() == "StatusCode.NOT_FOUND"
    c.close()


async def test_every_hostile_request_of_the_case_list_answers_its_4xx_with_a_json_error(served):
    model, url, _ = served
    wrong = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        for case in CASES:
            try:
                async with http.request(case.method, url + case.path.format(model=model), data=case.body,
                                        headers=case.headers) as r:
                    status, body = r.status, await r.read()
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                wrong.append((case.name, repr(exc)))
                continue
            try:
                doc = json.loads(body)
            except ValueError:
                doc = None
            error = doc.get("error") if isinstance(doc, dict) else None
            if status != case.status or not (isinstance(error, str) and case.says in error):
                wrong.append((case.name, status, body[:200]))
    assert wrong == [], wrong
    print(f"{len(CASES)} hostile requests, each answered its 4xx with the protocol's JSON error body")


def test_schemathesis_generated_requests_get_no_server_error(served, tmp_path):
    """schemathesis's command line against the gateway with ``gateway/openapi.yaml``, its model routes
    also at the served model and version 1 (so that bodies, not names, are what a negative case breaks
    there): the coverage phase (each field's edges and wrong types) and fuzzing, positive and negative.
    Checks: no 5xx but the pipeline's documented 504 for a request it dropped (a generated
    ``deadline_ms`` or ``accuracy_floor`` it cannot meet); every answer in the documented content type
    and schema (an error: the protocol's JSON error object); invalid data refused with a 4xx; an
    undocumented method 405 with ``Allow``."""
    model, url, _ = served
    doc = yaml.safe_load((ROOT / "gateway/openapi.yaml").read_text())
    for path, item in list(doc["paths"].items()):
        if "{model}" in path:
            concrete = {k: v for k, v in item.items() if k != "parameters"}
            doc["paths"][path.replace("{model}", model).replace("{version}", "1")] = concrete
    (tmp_path / "openapi.yaml").write_text(yaml.safe_dump(doc))
    (tmp_path / "schemathesis.toml").write_text('[checks.not_a_server_error]\n'
                                                'expected-statuses = ["2XX", "4XX", "504"]\n')
    out = subprocess.run(
        [sys.executable, "-c", "from schemathesis.cli import schemathesis; schemathesis()",
         "--config-file", str(tmp_path / "schemathesis.toml"), "run", str(tmp_path / "openapi.yaml"), "--url", url,
         "--checks", "not_a_server_error,response_schema_conformance,content_type_conformance,"
                     "negative_data_rejection,unsupported_method",
         "--phases", "examples,coverage,fuzzing", "--max-examples", "30", "--seed", "1", "--workers", "1",
         "--no-shrink", "--warnings", "off", "--request-timeout", "30",
         "--report", "ndjson", "--report-ndjson-path", str(tmp_path / "run.ndjson")],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    summary = "\n".join(out.stdout.splitlines()[-25:])
    generated = re.search(r"(\d+) generated", out.stdout)
    report = (tmp_path / "run.ndjson").read_text() if (tmp_path / "run.ndjson").exists() else ""
    codes = collections.Counter(int(c) for c in re.findall(r'"status_code": ?(\d+)', report))
    print(f"schemathesis: {generated.group(0) if generated else '?'}, answers {dict(sorted(codes.items()))}")
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    assert generated and int(generated.group(1)) >= SCHEMATHESIS_CASES, summary
    assert codes[200] and codes[400] and codes[404] and not set(codes) - {200, 400, 404, 405, 413, 429, 504}, codes
