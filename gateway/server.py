"""The gateway process: an aiohttp server in front of one pipeline (Open Inference Protocol V2, REST),
and with ``grpc_port`` the same protocol's gRPC service beside it (``slipstream.gateway.grpc_server``); both go
through one request path (``slipstream.gateway.core.Gateway``).

REST answers: 200 done (output, status, per-hop timings in ``parameters``); 504 dropped (the drop
reason), or no result by the deadline + ``grace_ms`` (status ``pending``); 400 an error result the
request caused (the contract's field and value), 500 any other error result (``oip.result_code``); 429
shed with ``Retry-After``; 400 a request the protocol cannot take; 404 another model; 413 a body over
``max_body_bytes`` or a record over the input topic's limit; 503 with ``Retry-After`` not ready (Kafka
unreachable included), or the request not confirmed by Kafka within its deadline + grace.

The versioned routes (``/v2/models/{m}/versions/{v}``, ``.../ready``, ``.../infer``) serve version
``1``, the one the metadata lists; another version is a 404. Every error is the protocol's error body
(JSON ``{"error": "..."}``): aiohttp's own 404 of an unknown route, 405 of a method a route lacks and
413 of a body over the limit go through :func:`oip_errors`, which also turns an exception no handler
expected into a logged 500 with that body, never plain text.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
import time

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..streams.config import KafkaSettings
from ..streams.spec import Pipeline

from . import oip
from .core import RETRY_UNAVAILABLE_S, Answer, Gateway, GatewayConfig

__all__ = ["GRPC_READY", "READY", "READY_LINE", "GatewayConfig", "RestApi", "oip_errors", "serve"]
log = logging.getLogger(__name__)
READY_LINE = "slipstream-gateway ready pipeline={pipeline} addr={addr} grpc={grpc} at_ns={at_ns}"
READY = re.compile(r"slipstream-gateway ready pipeline=\S+ addr=(\S+)")  # what process supervisors wait for
GRPC_READY = re.compile(r"slipstream-gateway ready pipeline=\S+ addr=\S+ grpc=(\S+)")


@web.middleware
async def oip_errors(request: web.Request, handler) -> web.StreamResponse:
    """aiohttp's own errors (unknown route, method not allowed, body too large...) and any exception a
    handler did not expect, as the protocol's JSON error body with their status."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        if isinstance(exc, web.HTTPMethodNotAllowed):
            allowed = ", ".join(sorted(exc.allowed_methods))
            message = f"method {request.method} not allowed on {request.path} (allowed: {allowed})"
        elif isinstance(exc, web.HTTPNotFound):
            message = f"no route {request.path}"
        else:
            message = exc.text or exc.reason
        headers = {k: v for k, v in exc.headers.items() if k.lower() not in ("content-type", "content-length")}
        return web.Response(status=exc.status, body=oip.error_body(message),
                            headers={**headers, "Content-Type": "application/json"})
    except Exception as exc:  # noqa: BLE001 - a bug answers JSON with its status, and is logged
        log.exception("%s %s failed", request.method, request.path)
        return web.Response(status=500, body=oip.error_body(f"internal error: {exc!r}"[:500]),
                            headers={"Content-Type": "application/json"})


class InFlight:
    """What the infer calls being read or answered hold: their count and their declared body bytes
    (``Content-Length``; a chunked body counts as ``max_body_bytes``), each bounded by the config."""

    def __init__(self, cfg: GatewayConfig) -> None:
        self.cfg, self.calls, self.bytes = cfg, 0, 0

    def refusal(self, declared: int) -> str | None:
        if self.calls + 1 > self.cfg.max_in_flight:
            return f"{self.calls} calls in flight, the gateway's limit (max_in_flight)"
        if self.bytes + declared > self.cfg.max_bytes_in_flight:
            return f"{self.bytes} body bytes in flight, {declared} more would pass max_bytes_in_flight"
        return None

    @contextlib.contextmanager
    def holding(self, declared: int):
        self.calls, self.bytes = self.calls + 1, self.bytes + declared
        try:
            yield
        finally:
            self.calls, self.bytes = self.calls - 1, self.bytes - declared


class RestApi:
    def __init__(self, gw: Gateway) -> None:
        self.gw, self.pipe = gw, gw.pipe
        self.in_flight = InFlight(gw.cfg)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.gw.cfg.max_body_bytes, middlewares=[oip_errors])
        app.add_routes([
            web.get("/v2", self.server_metadata),
            web.get("/v2/", self.server_metadata),  # the protocol's specification spells it so
            web.get("/v2/health/live", self.live),
            web.get("/v2/health/ready", self.ready),
            *(r for model in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}") for r in (
                web.get(model, self.model_metadata),
                web.get(f"{model}/ready", self.model_ready),
                web.post(f"{model}/infer", self.infer))),
            web.get("/metrics", self.prometheus),
        ])
        return app

    async def server_metadata(self, request: web.Request) -> web.Response:
        return web.json_response(oip.server_metadata())

    async def live(self, request: web.Request) -> web.Response:
        return web.json_response({"live": True})

    async def ready(self, request: web.Request) -> web.Response:
        why = self.gw.not_ready()
        if why is None:
            return web.json_response({"ready": True})
        return web.json_response({"ready": False, "reason": why, "error": f"not ready: {why}"}, status=503)

    def _not_served(self, request: web.Request) -> web.Response | None:
        why = self.gw.not_served(request.match_info["model"], request.match_info.get("version", ""))
        return None if why is None else self._error(Answer(404, why))

    async def model_ready(self, request: web.Request) -> web.Response:
        return self._not_served(request) or await self.ready(request)

    async def model_metadata(self, request: web.Request) -> web.Response:
        return self._not_served(request) or web.json_response(oip.metadata(self.pipe))

    async def prometheus(self, request: web.Request) -> web.Response:
        m = self.gw.metrics
        m.in_flight.labels(self.pipe.name).set(self.gw.outcomes.in_flight)
        planned = self.gw.control.planned_qps()
        m.planned_qps.labels(self.pipe.name).set(math.nan if planned is None else planned)
        return web.Response(body=generate_latest(m.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    @staticmethod
    def _error(a: Answer) -> web.Response:
        headers = {"Content-Type": "application/json"}
        if a.retry_after_s is not None:
            headers["Retry-After"] = str(a.retry_after_s)
        return web.Response(status=a.code, body=oip.error_body(a.message, **a.parameters), headers=headers)

    async def infer(self, request: web.Request) -> web.Response:
        arrived = time.time_ns()
        unknown = self.gw.unknown_model(request.match_info["model"], request.match_info.get("version", ""))
        if unknown:
            return self._error(unknown)
        cfg = self.gw.cfg
        declared = request.content_length if request.content_length is not None else cfg.max_body_bytes
        if declared > cfg.max_body_bytes:  # refused before a byte of the body is read
            return self._error(self.gw.refuse(413, f"request body of {declared} bytes over {cfg.max_body_bytes}"))
        why = self.in_flight.refusal(declared)
        if why is not None:
            return self._error(self.gw.refuse(503, f"overloaded: {why}", retry_after_s=RETRY_UNAVAILABLE_S))
        with self.in_flight.holding(declared):
            return await self._infer(request, arrived)

    async def _infer(self, request: web.Request, arrived: int) -> web.Response:
        cfg = self.gw.cfg
        try:
            body = await asyncio.wait_for(request.read(), cfg.body_timeout_s)
            call = oip.parse_infer(body, request.headers)
        except TimeoutError:
            return self._error(self.gw.refuse(408, f"request body not read whole within {cfg.body_timeout_s:g} s"))
        except oip.ProtocolError as exc:
            return self._error(self.gw.refuse(400, str(exc)))
        except web.HTTPRequestEntityTooLarge:
            return self._error(self.gw.refuse(413, f"request body over {cfg.max_body_bytes} bytes"))
        a = await self.gw.answer(call, arrived)
        if a.code != 200:
            return self._error(a)
        body, headers = oip.infer_response(self.pipe.name, call, a.result)
        return web.Response(body=body, headers=headers)


async def serve(pipe: Pipeline, kafka: KafkaSettings, cfg: GatewayConfig, stop: asyncio.Event,
                on_ready=lambda addr, grpc_addr: None) -> None:
    """Run a gateway until ``stop`` is set: Kafka readers first, then the HTTP site (and the gRPC server
    with ``cfg.grpc_port``); ``on_ready`` gets the bound ``host:port`` of each (gRPC: None without it)
    once requests are taken."""
    gw = Gateway(pipe, kafka, cfg)
    await gw.start()
    runner = web.AppRunner(RestApi(gw).app(), access_log=None, handle_signals=False)
    await runner.setup()
    grpc = None
    try:
        site = web.TCPSite(runner, cfg.host, cfg.port)
        await site.start()
        host, port = runner.addresses[0][:2]
        grpc_addr = None
        if cfg.grpc_port is not None:
            from . import grpc_server

            grpc, grpc_addr = await grpc_server.start(gw, cfg.host, cfg.grpc_port)
        on_ready(f"{host}:{port}", grpc_addr)
        await stop.wait()
    finally:
        if grpc is not None:
            await grpc.stop(grace=1.0)
        await runner.cleanup()
        await gw.stop()
