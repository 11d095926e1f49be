"""The gateway process: an aiohttp server in front of one pipeline (Open Inference Protocol V2, REST).

One :class:`streams.client.PipelineClient` per process produces every request and reads the results
topic: it is assigned every partition of the topic (no consumer group, so gateways never split the
partitions between them and each sees every result), seeks to the topic's end and resolves those
offsets at start-up, *before* the server accepts a request; results are matched to waiting requests by
request id. A gateway that dies loses only its own callers' answers; the others' results still reach
their gateways, and the requests themselves are still served (they are in Kafka).

Answers: 200 done (output, status, per-hop timings in ``parameters``); 504 dropped (the drop reason),
or no result by the deadline + ``grace_ms`` (status ``pending``); 400 an error result the request caused
(the contract's field and value), 500 any other error result (``oip.result_code``); 429 shed
with ``Retry-After``; 400 a request the protocol cannot take; 404 another model; 413 a body over
``max_body_bytes``; 503 not ready, or the request could not be produced.
"""
from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from streams.client import PipelineClient, make_request
from streams.config import KafkaSettings
from streams.spec import Pipeline

from gateway import oip
from gateway.control_view import ControlView
from gateway.metrics import GatewayMetrics
from gateway.shedding import Outcomes, decide

log = logging.getLogger(__name__)
READY_LINE = "slipstream-gateway ready pipeline={pipeline} addr={addr} at_ns={at_ns}"
READY = re.compile(r"slipstream-gateway ready pipeline=\S+ addr=(\S+)")  # what process supervisors wait for


@dataclass(frozen=True)
class GatewayConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    grace_ms: float = 500.0  # waited past a request's deadline for its result's transit
    window_s: float = 5.0  # of the outcomes the shedding rule reads
    max_body_bytes: int = 8 * 1024 * 1024  # the producer's max_request_size (streams.kafka.producer)
    linger_ms: int = 0  # each request produced as it comes (docs/gateway.md, what the gateway adds)

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port}")
        if self.grace_ms < 0 or self.window_s <= 0 or self.max_body_bytes < 1 or self.linger_ms < 0:
            raise ValueError(f"grace_ms >= 0, window_s > 0, max_body_bytes >= 1 and linger_ms >= 0, got {self}")


class Gateway:
    def __init__(self, pipe: Pipeline, kafka: KafkaSettings, cfg: GatewayConfig = GatewayConfig()) -> None:
        self.pipe, self.cfg = pipe, cfg
        self.client = PipelineClient(pipe, kafka, linger_ms=cfg.linger_ms)
        self.control = ControlView(kafka, pipe.name)
        self.outcomes = Outcomes(window_s=cfg.window_s)
        self.metrics = GatewayMetrics.create(pipe.name)

    async def start(self) -> None:
        await self.client.start()  # results read from their end, resolved before any request is taken
        await self.control.start()

    async def stop(self) -> None:
        await self.control.stop()
        await self.client.stop()

    def not_ready(self) -> str | None:
        if not self.client.running:
            return "the results reader is not running"
        if not self.control.running:
            return "the control-topic reader is not running"
        return None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.cfg.max_body_bytes)
        app.add_routes([
            web.get("/v2", self.server_metadata),
            web.get("/v2/health/live", self.live),
            web.get("/v2/health/ready", self.ready),
            web.get("/v2/models/{model}", self.model_metadata),
            web.get("/v2/models/{model}/ready", self.ready),
            web.post("/v2/models/{model}/infer", self.infer),
            web.get("/metrics", self.prometheus),
        ])
        return app

    async def server_metadata(self, request: web.Request) -> web.Response:
        return web.json_response({"name": "slipstream", "version": "1", "extensions": ["binary_tensor_data"]})

    async def live(self, request: web.Request) -> web.Response:
        return web.json_response({"live": True})

    async def ready(self, request: web.Request) -> web.Response:
        why = self.not_ready()
        return web.json_response({"ready": why is None, **({"reason": why} if why else {})},
                                 status=200 if why is None else 503)

    async def model_metadata(self, request: web.Request) -> web.Response:
        if request.match_info["model"] != self.pipe.name:
            return self._error(404, f"no model {request.match_info['model']!r}: this gateway serves {self.pipe.name!r}")
        return web.json_response(oip.metadata(self.pipe))

    async def prometheus(self, request: web.Request) -> web.Response:
        self.metrics.in_flight.labels(self.pipe.name).set(self.outcomes.in_flight)
        planned = self.control.planned_qps()
        self.metrics.planned_qps.labels(self.pipe.name).set(math.nan if planned is None else planned)
        return web.Response(body=generate_latest(self.metrics.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    def _error(self, code: int, message: str, headers: dict | None = None, **parameters) -> web.Response:
        self.metrics.answered(code)
        return web.Response(status=code, body=oip.error_body(message, **parameters),
                            headers={"Content-Type": "application/json", **(headers or {})})

    async def infer(self, request: web.Request) -> web.Response:
        arrived = time.time_ns()
        if request.match_info["model"] != self.pipe.name:
            return self._error(404, f"no model {request.match_info['model']!r}: this gateway serves {self.pipe.name!r}")
        why = self.not_ready()
        if why is not None:
            return self._error(503, f"not ready: {why}")
        try:
            call = oip.parse_infer(await request.read(), request.headers)
        except oip.ProtocolError as exc:
            return self._error(400, str(exc))
        except web.HTTPRequestEntityTooLarge:
            return self._error(413, f"request body over {self.cfg.max_body_bytes} bytes")
        budget = oip.budget_ms(call.deadline_ms, self.pipe.slo_ms)
        decision = decide(self.outcomes.load(time.time_ns(), self.control.planned_qps()), budget)
        if not decision.admit:
            self.metrics.shed.labels(self.pipe.name).inc()
            return self._error(429, f"shed: {decision.reason}", {"Retry-After": str(decision.retry_after_s)},
                               retry_after_s=decision.retry_after_s, predicted_ms=decision.predicted_ms,
                               budget_ms=budget)
        req = make_request(self.pipe, call.payload, content_type=call.content_type, slo_ms=budget,
                           accuracy_floor=call.accuracy_floor, created_ns=arrived)
        return await self._admitted(call, req)

    async def _admitted(self, call: oip.InferCall, req: dict) -> web.Response:
        rid = req["request_id"]
        self.outcomes.admitted(time.time_ns())
        answered, status = False, "pending"
        try:
            try:
                await self.client.send(req)
            except Exception as exc:  # noqa: BLE001 - any producer failure: the caller is told, not hung
                log.warning("request %s not produced: %r", rid, exc)
                return self._error(503, f"the request could not be produced: {exc!r}", request_id=rid)
            wait_s = max(0.0, (req["deadline_ns"] - time.time_ns()) / 1e9) + self.cfg.grace_ms / 1000
            try:
                res = await self.client.result(rid, timeout_s=wait_s)
            except TimeoutError:
                return self._error(504, f"no result within the deadline + {self.cfg.grace_ms:.0f} ms grace "
                                        "(the request may still be in the pipeline)",
                                   request_id=rid, status="pending",
                                   deadline_ms=(req["deadline_ns"] - req["created_ns"]) / 1e6)
            except RuntimeError as exc:  # the results reader stopped
                return self._error(503, str(exc), request_id=rid)
            answered, status = True, res["status"]
            code = oip.result_code(status, res["reason"])
            if code != 200:
                return self._error(code, f"{status}: {res['reason']}", **oip.result_parameters(res))
            body, headers = oip.infer_response(self.pipe.name, call, res)
            self.metrics.answered(200)
            return web.Response(body=body, headers=headers)
        finally:
            now = time.time_ns()
            self.client.forget(rid)
            done_ms = (now - req["created_ns"]) / 1e6 if status == "done" else None
            self.outcomes.left(now, answered, done_ms)
            self.metrics.latency.labels(self.pipe.name, status).observe((now - req["created_ns"]) / 1e9)


async def serve(pipe: Pipeline, kafka: KafkaSettings, cfg: GatewayConfig, stop: asyncio.Event,
                on_ready=lambda addr: None) -> None:
    """Run a gateway until ``stop`` is set: Kafka readers first, then the HTTP site; ``on_ready`` gets
    the bound ``host:port`` once requests are taken."""
    gw = Gateway(pipe, kafka, cfg)
    await gw.start()
    runner = web.AppRunner(gw.app(), access_log=None, handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, cfg.host, cfg.port)
        await site.start()
        host, port = runner.addresses[0][:2]
        on_ready(f"{host}:{port}")
        await stop.wait()
    finally:
        await runner.cleanup()
        await gw.stop()
