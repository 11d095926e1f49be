"""A Python client of the gateway with the surface of ``slipstream.streams.client.PipelineClient`` (``submit``,
``result``, ``async with``), so a caller chooses the path with one argument (:func:`connect`): Kafka
(the default) or a gateway's URL. ``slipstream submit --gateway URL`` uses it.

The HTTP mapping is pure and sits beside the server's (``slipstream.gateway.oip``): :func:`infer_body` builds the
Open Inference Protocol request (the payload as binary data, Slipstream's parameters), and
:func:`answer_result` turns an answer back into the ``InferenceResult`` it carries (200:
done; 504 with a result: dropped; 400 or 500 with a result: error, ``oip.result_code``), or raises: :class:`Shed` for 429 (with its
``Retry-After``), :class:`TimeoutError` for a 504 without a result (as ``PipelineClient.result``),
:class:`GatewayError` for any other refusal (400 with the field, 404, 413, 503).
"""
from __future__ import annotations

import asyncio
import json
import struct
import uuid
from typing import Any, Mapping

from ..schemas.records import HopTiming, InferenceResult
from ..streams.client import PipelineClient

from . import oip


class GatewayError(RuntimeError):
    """The gateway refused the request (its code and message)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"gateway answered {code}: {message}")
        self.code, self.message = code, message


class Shed(GatewayError):
    """429: the pipeline could not meet the request's deadline; retry after ``retry_after_s``."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(429, message)
        self.retry_after_s = retry_after_s


def infer_body(payload: bytes, content_type: str | None = None, client_id: str | None = None,
               deadline_ms: float | None = None, accuracy_floor: float | None = None) -> tuple[bytes, dict[str, str]]:
    """An infer request carrying ``payload`` as binary ``UINT8`` data (a file's bytes as they are), and
    its headers."""
    tensor: dict[str, Any] = {"name": oip.INPUT, "shape": [len(payload)], "datatype": "UINT8",
                              "parameters": {"binary_data_size": len(payload)}}
    if content_type is not None:
        tensor["parameters"]["content_type"] = content_type
    params = {k: v for k, v in (("deadline_ms", deadline_ms), ("accuracy_floor", accuracy_floor)) if v is not None}
    doc: dict[str, Any] = {"inputs": [tensor], "parameters": params}
    if client_id is not None:
        doc["id"] = client_id
    head = json.dumps(doc).encode()
    return head + payload, {oip.HEADER_LENGTH: str(len(head)), "Content-Type": "application/octet-stream"}


def answer_result(code: int, body: bytes, headers: Mapping[str, str]) -> InferenceResult:
    """The result an answer carries, as the record ``PipelineClient`` reads from the results topic
    (its hops without the ms split the gateway adds to them: the record's times give it again);
    raises for an answer without one."""
    doc = _json_head(body, headers)
    params = doc.get("parameters") or {}
    if "request_id" in params and code == oip.result_code(params.get("status", ""), params.get("reason", "")):
        return InferenceResult.from_dict({
            **{k: params[k] for k in ("request_id", "status", "reason", "accuracy", "content_type", "created_ns",
                                      "deadline_ns", "finished_ns")},
            "pipeline": doc.get("model_name", ""),
            "hops": [{k: h[k] for k in HopTiming.avro_fields if k in h} for h in params["hops"]],
            "output": _output(doc, body, headers) if code == 200 else b""})
    message = str(doc.get("error", body[:200]))
    if code == 429:
        raise Shed(message, int(headers.get("Retry-After", params.get("retry_after_s", 1))))
    if code == 504 and params.get("status") == "pending":
        raise TimeoutError(f"no result from the gateway: {message}")
    raise GatewayError(code, message)


def _json_head(body: bytes, headers: Mapping[str, str]) -> dict:
    n = int(headers.get(oip.HEADER_LENGTH, len(body)))
    try:
        doc = json.loads(body[:n])
    except ValueError:
        doc = None
    return doc if isinstance(doc, dict) else {"error": body[:200].decode(errors="replace")}


def _output(doc: Mapping, body: bytes, headers: Mapping[str, str]) -> bytes:
    tensor = doc["outputs"][0]
    if "data" in tensor:
        return tensor["data"][0].encode()
    blob = body[int(headers[oip.HEADER_LENGTH]):]
    (n,) = struct.unpack_from("<I", blob)
    return blob[4:4 + n]


class GatewayClient:
    """``PipelineClient``'s calls over HTTP: ``submit`` starts the request and returns its client id
    (the protocol's ``id``, echoed by the gateway), ``result`` awaits its answer."""

    def __init__(self, pipe, url: str, timeout_s: float = 60.0) -> None:
        self.pipe, self.url = pipe, url.rstrip("/")
        self.infer_url = f"{self.url}/v2/models/{pipe.name}/infer"
        self.timeout_s = timeout_s
        self._http = None
        self._calls: dict[str, asyncio.Task] = {}

    async def __aenter__(self) -> "GatewayClient":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    async def start(self) -> None:
        import aiohttp

        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))

    async def stop(self) -> None:
        for task in self._calls.values():
            task.cancel()
        await asyncio.gather(*self._calls.values(), return_exceptions=True)
        if self._http is not None:
            await self._http.close()

    async def call(self, payload: bytes, content_type: str | None = None, request_id: str | None = None,
                   slo_ms: float | None = None, accuracy_floor: float | None = None) -> InferenceResult:
        """One request, answered: its result (see :func:`answer_result`)."""
        body, headers = infer_body(payload, content_type, request_id, slo_ms, accuracy_floor)
        async with self._http.post(self.infer_url, data=body, headers=headers) as r:
            return answer_result(r.status, await r.read(), r.headers)

    async def submit(self, payload: bytes, request_id: str | None = None, **kw: Any) -> str:
        rid = request_id or uuid.uuid4().hex
        self._calls[rid] = asyncio.create_task(self.call(payload, request_id=rid, **kw))
        return rid

    async def result(self, request_id: str, timeout_s: float = 30.0) -> InferenceResult:
        task = self._calls[request_id]
        try:
            return await asyncio.wait_for(asyncio.shield(task), timeout_s)
        except TimeoutError:
            raise TimeoutError(f"no answer for request {request_id} within {timeout_s} s") from None
        finally:
            if task.done():
                self._calls.pop(request_id, None)


def connect(pipe, kafka, gateway: str | None = None):
    """The client of ``pipe``: through the gateway at ``gateway`` (a URL), else straight to Kafka."""
    if gateway:
        return GatewayClient(pipe, gateway)
    return PipelineClient(pipe, kafka)
