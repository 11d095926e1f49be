"""The gateway's request path, whatever the transport (REST: ``slipstream.gateway.server``; gRPC:
``slipstream.gateway.grpc_server``): readiness, the latency budget, the shedding decision, producing the request
and waiting for its result, the metrics. Each transport decodes its own request into an
:class:`oip.InferCall` and encodes the :class:`Answer`; nothing of admission, deadlines or shedding is
written twice.

One :class:`slipstream.streams.client.PipelineClient` per process produces every request and reads the results
topic: it is assigned every partition of the topic (no consumer group, so gateways never split the
partitions between them and each sees every result), seeks to the topic's end and resolves those
offsets at start-up, *before* a transport accepts a request; results are matched to waiting requests by
request id. A gateway that dies loses only its own callers' answers; the others' results still reach
their gateways, and the requests themselves are still served (they are in Kafka).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from ..schemas.records import InferenceRequest, InferenceResult
from ..streams.client import PipelineClient, make_request
from ..streams.config import KafkaSettings
from ..streams.limits import MAX_REQUEST_BYTES, RecordTooLarge
from ..streams.spec import Pipeline

from . import oip
from .control_view import ControlView
from .metrics import GatewayMetrics
from .shedding import Outcomes, decide

log = logging.getLogger(__name__)
RETRY_UNAVAILABLE_S = 1  # Retry-After of a 503: Kafka away or not confirming (probed every second)


@dataclass(frozen=True)
class GatewayConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    grace_ms: float = 500.0  # waited past a request's deadline for its result's transit
    window_s: float = 5.0  # of the outcomes the shedding rule reads
    max_body_bytes: int = MAX_REQUEST_BYTES  # read at most; the input topic's limit applies to the record
    linger_ms: int = 0  # each request produced as it comes (docs/gateway.md, what the gateway adds)
    grpc_port: int | None = None  # serve GRPCInferenceService too (0: any free port)
    body_timeout_s: float = 10.0  # a body not read whole within this is answered 408 (slow clients)
    max_in_flight: int = 2048  # infer calls being read or answered at once; beyond, 503 at once
    max_bytes_in_flight: int = 512 * 1024 * 1024  # their declared bodies in all; beyond, 503 at once

    def __post_init__(self) -> None:
        for port in (self.port, self.grpc_port):
            if port is not None and not 0 <= port <= 65535:
                raise ValueError(f"ports must be in 0..65535, got {port}")
        if self.grace_ms < 0 or self.window_s <= 0 or self.max_body_bytes < 1 or self.linger_ms < 0:
            raise ValueError(f"grace_ms >= 0, window_s > 0, max_body_bytes >= 1 and linger_ms >= 0, got {self}")
        if self.body_timeout_s <= 0 or self.max_in_flight < 1 or self.max_bytes_in_flight < self.max_body_bytes:
            raise ValueError(f"body_timeout_s > 0, max_in_flight >= 1 and max_bytes_in_flight >= max_body_bytes, "
                             f"got {self}")


@dataclass(frozen=True)
class Answer:
    """What the request path answers: ``code`` is the HTTP status (REST sends it, gRPC maps it);
    ``result`` the pipeline's result when there is one; ``parameters`` the details of an error answer
    (status, reason, request id, the prediction of a shed)."""

    code: int
    message: str = ""
    result: InferenceResult | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    retry_after_s: int | None = None  # 429, 503


class Gateway:
    def __init__(self, pipe: Pipeline, kafka: KafkaSettings, cfg: GatewayConfig = GatewayConfig()) -> None:
        self.pipe, self.cfg = pipe, cfg
        self.client = PipelineClient(pipe, kafka, linger_ms=cfg.linger_ms)
        self.metrics = GatewayMetrics.create(pipe.name)
        self.control = ControlView(kafka, pipe.name, pipe, self.metrics.control_invalid.labels(pipe.name).inc)
        self.outcomes = Outcomes(window_s=cfg.window_s)

    async def start(self) -> None:
        await self.client.start()  # results read from their end, resolved before any request is taken
        await self.control.start()

    async def stop(self) -> None:
        await self.control.stop()
        await self.client.stop()

    def not_ready(self) -> str | None:
        if self.client.unreachable:
            return self.client.unreachable
        if not self.client.running:
            return "the results reader is not running"
        if not self.control.running:
            return "the control-topic reader is not running"
        return None

    def not_served(self, name: str, version: str = "") -> str | None:
        """None for the served model (the pipeline) at its one version (``""``: the latest), else why
        not (a 404 for metadata, readiness and infer alike)."""
        if name != self.pipe.name:
            return f"no model {name!r}: this gateway serves {self.pipe.name!r}"
        if version not in ("", oip.VERSION):
            return f"no version {version!r} of model {name!r}: its one version is {oip.VERSION!r}"
        return None

    def unknown_model(self, name: str, version: str = "") -> Answer | None:
        """An infer call's 404 answer (counted) when it names a model or version not served."""
        why = self.not_served(name, version)
        return None if why is None else self.refuse(404, why)

    def refuse(self, code: int, message: str, **parameters: Any) -> Answer:
        """An error answer, counted (a transport refusing what it cannot decode calls this too);
        ``retry_after_s`` among the parameters is also the answer's (429)."""
        self.metrics.answered(code)
        return Answer(code, message, parameters=parameters, retry_after_s=parameters.get("retry_after_s"))

    async def answer(self, call: oip.InferCall, arrived_ns: int) -> Answer:
        """One decoded request, from arrival to answer: 503 not ready, 429 shed, else admitted."""
        why = self.not_ready()
        if why is not None:
            return self.refuse(503, f"not ready: {why}", retry_after_s=RETRY_UNAVAILABLE_S)
        budget = oip.budget_ms(call.deadline_ms, self.pipe.slo_ms)
        decision = decide(self.outcomes.load(time.time_ns(), self.control.planned_qps()), budget)
        if not decision.admit:
            self.metrics.shed.labels(self.pipe.name).inc()
            return self.refuse(429, f"shed: {decision.reason}", retry_after_s=decision.retry_after_s,
                               predicted_ms=decision.predicted_ms, budget_ms=budget)
        req = make_request(self.pipe, call.payload, content_type=call.content_type, slo_ms=budget,
                           accuracy_floor=call.accuracy_floor, created_ns=arrived_ns)
        return await self._admitted(req)

    def _left_s(self, req: InferenceRequest) -> float:
        return max(0.0, (req.deadline_ns - time.time_ns()) / 1e9) + self.cfg.grace_ms / 1000

    async def _produce(self, req: InferenceRequest) -> Answer | None:
        """Produce ``req``, confirmed within its deadline + grace; else the refusal: 413 over the input
        topic's limit, 503 (with ``Retry-After``) when Kafka did not confirm it or refused it."""
        rid = req.request_id
        try:
            await self.client.send(req, timeout_s=self._left_s(req))
        except RecordTooLarge as exc:
            return self.refuse(413, str(exc), request_id=rid, limit_bytes=exc.limit)
        except TimeoutError:
            return self.refuse(503, "Kafka did not confirm the request within its deadline + grace",
                               request_id=rid, retry_after_s=RETRY_UNAVAILABLE_S)
        except Exception as exc:  # noqa: BLE001 - any producer failure: the caller is told, not hung
            log.warning("request %s not produced: %r", rid, exc)
            return self.refuse(503, f"the request could not be produced: {exc!r}", request_id=rid,
                               retry_after_s=RETRY_UNAVAILABLE_S)
        return None

    async def _admitted(self, req: InferenceRequest) -> Answer:
        rid = req.request_id
        self.outcomes.admitted(time.time_ns())
        answered, status = False, "pending"
        try:
            refused = await self._produce(req)
            if refused is not None:
                return refused
            wait_s = self._left_s(req)
            try:
                res = await self.client.result(rid, timeout_s=wait_s)
            except TimeoutError:
                return self.refuse(504, f"no result within the deadline + {self.cfg.grace_ms:.0f} ms grace "
                                        "(the request may still be in the pipeline)",
                                   request_id=rid, status="pending",
                                   deadline_ms=(req.deadline_ns - req.created_ns) / 1e6)
            except RuntimeError as exc:  # the results reader stopped
                return self.refuse(503, str(exc), request_id=rid)
            answered, status = True, res.status
            code = oip.result_code(status, res.reason)
            self.metrics.answered(code)
            if code == 200:
                return Answer(200, result=res)
            return Answer(code, f"{status}: {res.reason}", result=res, parameters=oip.result_parameters(res))
        finally:
            now = time.time_ns()
            self.client.forget(rid)
            done_ms = (now - req.created_ns) / 1e6 if status == "done" else None
            self.outcomes.left(now, answered, done_ms)
            self.metrics.latency.labels(self.pipe.name, status).observe((now - req.created_ns) / 1e9)
