"""The Open Inference Protocol's gRPC service (``inference.GRPCInferenceService``: ServerLive,
ServerReady, ModelReady, ServerMetadata, ModelMetadata, ModelInfer) on grpcio's asyncio server, in the
gateway process beside the REST API and through the same request path (``slipstream.gateway.core.Gateway``):
admission, deadlines, shedding and metrics are the REST ones.

ModelInfer takes one input tensor named ``input`` as REST does (``slipstream.gateway.oip``; requested outputs
name ``output``; ``model_version`` is empty or ``1``, as in ModelReady and ModelMetadata): raw
contents (``raw_input_contents``: a ``UINT8`` tensor is a file's bytes as they are, ``BYTES`` one 4-byte little-endian length-prefixed
element, as ``tritonclient`` sends it) or typed contents (``bytes_contents``, ``fp32_contents``...).
Parameters: ``deadline_ms`` and ``accuracy_floor`` (``double_param``, ``int64_param`` or a string
holding a number) and the input's ``content_type``; without
``deadline_ms`` the call's own gRPC deadline is the budget. The answer: the output tensor ``output``
(``BYTES``, one raw length-prefixed element), the result's status, reason, request id, latency and
accuracy in ``parameters``, the hop timings as JSON in ``parameters["hops"]``. Errors are gRPC status
codes (:data:`GRPC_CODES`, from the REST status the request path gives) with the same message, and
the request id, status and reason in the trailing metadata (``slipstream-request-id``,
``slipstream-status``, ``slipstream-reason``; ``retry-after`` for a shed).
"""
from __future__ import annotations

import json
import struct
import time
from typing import Any

import grpc
from grpc import aio

from ..schemas.records import InferenceResult

from . import oip
from .core import Answer, Gateway
from .grpc_v2 import grpc_predict_v2_pb2 as pb  # noqa: I001 - generated
from .grpc_v2 import grpc_predict_v2_pb2_grpc as pb_grpc

GRPC_CODES = {400: grpc.StatusCode.INVALID_ARGUMENT, 404: grpc.StatusCode.NOT_FOUND,
              413: grpc.StatusCode.RESOURCE_EXHAUSTED, 429: grpc.StatusCode.RESOURCE_EXHAUSTED,
              500: grpc.StatusCode.INTERNAL, 503: grpc.StatusCode.UNAVAILABLE,
              504: grpc.StatusCode.DEADLINE_EXCEEDED}
CONTENTS = {"BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
            "INT64": "int64_contents", "UINT8": "uint_contents", "UINT16": "uint_contents",
            "UINT32": "uint_contents", "UINT64": "uint64_contents", "FP32": "fp32_contents",
            "FP64": "fp64_contents", "BYTES": "bytes_contents"}


def _param(p: pb.InferParameter) -> Any:
    return getattr(p, p.WhichOneof("parameter_choice")) if p.WhichOneof("parameter_choice") else None


def parse_infer(req: pb.ModelInferRequest, time_remaining_s: float | None = None) -> oip.InferCall:
    """A ModelInferRequest as the call REST decodes (``oip.InferCall``); ProtocolError names the field."""
    if len(req.inputs) != 1:
        raise oip.ProtocolError(f"inputs: expected one tensor ({oip.INPUT!r}: the request payload), got {len(req.inputs)}")
    t = req.inputs[0]
    oip.input_name(t.name)
    oip.output_names(o.name for o in req.outputs)
    tensor = {"name": t.name, "datatype": t.datatype, "shape": list(t.shape)}
    if len(req.raw_input_contents) > 1:
        raise oip.ProtocolError(f"raw_input_contents: one per input, got {len(req.raw_input_contents)}")
    if req.raw_input_contents:
        payload = oip.binary_tensor(tensor, bytes(req.raw_input_contents[0]))
    elif t.datatype == "BYTES":
        data = list(t.contents.bytes_contents)
        if len(data) != 1:
            raise oip.ProtocolError(f"inputs[0].contents.bytes_contents: a BYTES input carries one element, got {len(data)}")
        payload = oip.binary_tensor(tensor, struct.pack("<I", len(data[0])) + data[0])
    else:
        field = CONTENTS.get(t.datatype)
        payload = oip.json_tensor({**tensor, "data": list(getattr(t.contents, field)) if field else None})
    ctype = oip.content_type(_param(t.parameters["content_type"]) if "content_type" in t.parameters else None)
    params = {k: _numeric(_param(v)) for k, v in req.parameters.items()}
    if "deadline_ms" not in params and time_remaining_s is not None:
        params["deadline_ms"] = max(time_remaining_s * 1000.0, 0.001)  # the call's own deadline
    deadline_ms, accuracy_floor = oip.call_parameters(params, {})
    return oip.InferCall(payload=payload, content_type=ctype, client_id=req.id or None, deadline_ms=deadline_ms,
                         accuracy_floor=accuracy_floor, binary_output=True)


def _numeric(v: Any) -> Any:
    """A numeric string as its number (KServe's parameters have no double); anything else as it is."""
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            pass
    return v


def _set(p: pb.InferParameter, v: Any) -> None:
    if isinstance(v, bool):
        p.bool_param = v
    elif isinstance(v, int):
        p.int64_param = v
    elif isinstance(v, float):
        p.double_param = v
    else:
        p.string_param = v if isinstance(v, str) else json.dumps(v)  # hops, fields: JSON


def infer_response(model: str, call: oip.InferCall, res: InferenceResult) -> pb.ModelInferResponse:
    """A done result as ModelInferResponse: the output as one raw BYTES element, the result's
    parameters (``oip.result_parameters``) as the response's."""
    out = pb.ModelInferResponse(model_name=model, model_version=oip.VERSION, id=call.client_id or "")
    for k, v in oip.result_parameters(res).items():
        _set(out.parameters[k], v)
    tensor = out.outputs.add(name=oip.OUTPUT, datatype="BYTES", shape=[1])
    tensor.parameters["content_type"].string_param = res.content_type
    out.raw_output_contents.append(struct.pack("<I", len(res.output)) + res.output)
    return out


def _ascii(v: Any) -> str:
    return str(v).encode("ascii", "backslashreplace").decode()[:4000]


class InferenceService(pb_grpc.GRPCInferenceServiceServicer):
    def __init__(self, gw: Gateway) -> None:
        self.gw = gw

    async def _abort(self, context: aio.ServicerContext, a: Answer) -> None:
        meta = [(f"slipstream-{k.replace('_', '-')}", _ascii(a.parameters[k]))
                for k in ("request_id", "status", "reason") if k in a.parameters]
        if a.retry_after_s is not None:
            meta.append(("retry-after", str(a.retry_after_s)))
        await context.abort(GRPC_CODES.get(a.code, grpc.StatusCode.UNKNOWN), a.message, tuple(meta))

    async def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=self.gw.not_ready() is None)

    async def ModelReady(self, request, context):
        served = self.gw.not_served(request.name, request.version) is None
        return pb.ModelReadyResponse(ready=served and self.gw.not_ready() is None)

    async def ServerMetadata(self, request, context):
        return pb.ServerMetadataResponse(**oip.server_metadata())

    async def ModelMetadata(self, request, context):
        why = self.gw.not_served(request.name, request.version)
        if why is not None:
            await self._abort(context, Answer(404, why))
        md = oip.metadata(self.gw.pipe)
        tm = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name=md["name"], versions=md["versions"], platform=md["platform"],
            inputs=[tm(name=t["name"], datatype=t["datatype"], shape=t["shape"]) for t in md["inputs"]],
            outputs=[tm(name=t["name"], datatype=t["datatype"], shape=t["shape"]) for t in md["outputs"]])

    async def ModelInfer(self, request, context):
        arrived = time.time_ns()
        unknown = self.gw.unknown_model(request.model_name, request.model_version)
        if unknown:
            await self._abort(context, unknown)
        try:
            call = parse_infer(request, context.time_remaining())
        except oip.ProtocolError as exc:
            await self._abort(context, self.gw.refuse(400, str(exc)))
        a = await self.gw.answer(call, arrived)
        if a.code != 200:
            await self._abort(context, a)
        return infer_response(self.gw.pipe.name, call, a.result)


async def start(gw: Gateway, host: str, port: int) -> tuple[aio.Server, str]:
    """The gRPC server of ``gw``, started: (server, bound ``host:port``)."""
    limit = gw.cfg.max_body_bytes
    server = aio.server(options=[("grpc.max_receive_message_length", limit),
                                 ("grpc.max_send_message_length", limit + 64 * 1024)])
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(InferenceService(gw), server)
    bound = server.add_insecure_port(f"{host}:{port}")
    await server.start()
    return server, f"{host}:{bound}"
