"""Every malformed or hostile request of ``tests/gateway_cases.py`` through the real REST app (aiohttp's
in-process test server, no Kafka): its 4xx status and the protocol's JSON error body, never a 5xx nor
plain text. The same server answers the versioned routes for version 1 and readiness per model."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
from aiohttp.test_utils import TestClient, TestServer

from slipstream.gateway.core import Gateway
from slipstream.gateway.server import RestApi
from slipstream.schemas.records import InferenceRequest, InferenceResult
from slipstream.streams.config import KafkaSettings
from slipstream.streams.spec import parse_pipeline
from tests.gateway_cases import CASES, VALID

from .test_oip import result

PIPE = parse_pipeline({"name": "p", "slo_ms": 400, "hardware": {"c": {"kind": "cpu", "cost_per_hour": 0.1}},
                       "stages": [{"name": "s", "variants": [{"name": "a", "model": "noop", "accuracy": 0.7}]}]})


class Answers:
    """The results reader and producer, stubbed: every produced request is answered done at once."""

    def __init__(self) -> None:
        self.sent: list[InferenceRequest] = []
        self.running = True

    async def send(self, req: dict, timeout_s: float | None = None) -> None:
        self.sent.append(req)

    async def result(self, rid: str, timeout_s: float) -> InferenceResult:
        req = next(r for r in self.sent if r.request_id == rid)
        return replace(result(b"ok", "text/plain"), request_id=rid, created_ns=req.created_ns,
                       deadline_ns=req.deadline_ns, finished_ns=req.created_ns + 1_000_000)

    def forget(self, rid: str) -> None:
        pass


@pytest.fixture
async def http():
    gw = Gateway(PIPE, KafkaSettings.from_env({}))
    gw.client = Answers()
    gw.not_ready = lambda: None
    async with TestClient(TestServer(RestApi(gw).app())) as client:
        client.gw = gw
        yield client


async def answer(http, method: str, path: str, body: bytes = b"", headers: dict | None = None):
    async with http.request(method, path.format(model=PIPE.name), data=body, headers=headers or {}) as r:
        return r.status, r.headers.get("Content-Type", ""), await r.read()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_a_hostile_request_answers_its_4xx_with_an_oip_error_body(http, case):
    status, ctype, body = await answer(http, case.method, case.path, case.body, case.headers)
    assert status == case.status, body[:300]
    assert ctype.startswith("application/json"), (ctype, body[:300])
    doc = json.loads(body)
    assert isinstance(doc, dict) and isinstance(doc.get("error"), str) and case.says in doc["error"], doc
    assert http.gw.client.sent == []  # refused at the door: nothing produced


async def test_the_versioned_routes_serve_version_1(http):
    for path in ("/v2/models/p/ready", "/v2/models/p/versions/1/ready"):
        assert (await answer(http, "GET", path))[0] == 200
    status, _, body = await answer(http, "GET", "/v2/models/p/versions/1")
    assert status == 200 and json.loads(body)["versions"] == ["1"]
    status, _, body = await answer(http, "POST", "/v2/models/p/versions/1/infer", VALID)
    assert status == 200 and json.loads(body)["model_version"] == "1", body
    assert len(http.gw.client.sent) == 1


async def test_a_model_not_served_is_not_ready_and_an_unready_gateway_says_why(http):
    status, _, body = await answer(http, "GET", "/v2/models/other/ready")
    assert status == 404 and "other" in json.loads(body)["error"]
    http.gw.not_ready = lambda: "the results reader is not running"
    status, _, body = await answer(http, "GET", "/v2/models/p/ready")
    assert status == 503 and json.loads(body) == {"ready": False, "reason": "the results reader is not running",
                                                  "error": "not ready: the results reader is not running"}
