"""The Open Inference Protocol V2 (REST) for a Slipstream pipeline: pure decode and encode, no I/O.

A pipeline is one model, at one version (``1``), with one input tensor (``input``: the request
payload) and one output tensor (``output``: the result's output bytes); a request naming another input
or requesting another output is refused (400 naming it). Batching is the pipeline's own job, so a
request carries one payload:

- ``datatype: BYTES``: one element, a string in JSON (UTF-8) or, with the binary-data extension, one
  length-prefixed element (4-byte little-endian length, then the bytes: what ``tritonclient`` sends);
- any numeric datatype (``UINT8``, ``FP32``, ...): the tensor's elements, packed little-endian in
  row-major order (``UINT8`` of shape ``[N]`` in binary is a file's bytes as they are).

The binary-data extension: the header ``Inference-Header-Content-Length: n`` says the body's first n
bytes are the JSON header; an input with ``parameters.binary_data_size`` takes that many of the bytes
after it, in input order. ``parameters.content_type`` of the input names the payload's content type
(default: the pipeline's ``input_content_type``).

Slipstream's request parameters (body ``parameters`` first, then the headers): ``deadline_ms``
(``Slipstream-Deadline-Ms``), the latency budget from arrival, capped by the pipeline SLO; and
``accuracy_floor`` (``Slipstream-Accuracy-Floor``), the lowest variant accuracy the request accepts.
"""
from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..schemas.records import HopTiming, InferenceResult
from ..streams import contract

HEADER_LENGTH = "Inference-Header-Content-Length"
VERSION = "1"  # the one version of the pipeline as a model (``versions`` in its metadata)
DEADLINE_HEADER = "Slipstream-Deadline-Ms"
FLOOR_HEADER = "Slipstream-Accuracy-Floor"
INPUT, OUTPUT = "input", "output"
DTYPES = {"BOOL": "?", "UINT8": "<u1", "UINT16": "<u2", "UINT32": "<u4", "UINT64": "<u8", "INT8": "<i1",
          "INT16": "<i2", "INT32": "<i4", "INT64": "<i8", "FP16": "<f2", "FP32": "<f4", "FP64": "<f8"}
TEXT_TYPES = ("application/json", "text/")
INT64_MAX = 2**63 - 1  # a shape's dimensions are the protocol's int64
MAX_DIMS = 64


class ProtocolError(ValueError):
    """A request the protocol cannot take (answered 400 with the message)."""


@dataclass(frozen=True)
class InferCall:
    """What a decoded infer request asks for."""

    payload: bytes
    content_type: str | None  # None: the pipeline's input content type
    client_id: str | None  # the request's ``id``, echoed in the response
    deadline_ms: float | None
    accuracy_floor: float | None
    binary_output: bool


def budget_ms(requested_ms: float | None, slo_ms: float) -> float:
    """The request's latency budget: what it asked for, never more than the pipeline SLO."""
    return slo_ms if requested_ms is None else min(requested_ms, slo_ms)


def parse_infer(body: bytes, headers: Mapping[str, str]) -> InferCall:
    """Decode a ``POST /v2/models/{m}/infer`` body (JSON, or JSON + binary data); ProtocolError names
    the field that is wrong. Hostile bodies are ProtocolErrors too: JSON nested past the interpreter's
    recursion limit, integers past its digit limit or past a double, strings that are not UTF-8."""
    try:
        return _parse_infer(body, headers)
    except RecursionError:
        raise ProtocolError("the request header is nested too deep") from None


def _parse_infer(body: bytes, headers: Mapping[str, str]) -> InferCall:
    json_len = _header_length(headers.get(HEADER_LENGTH), len(body))
    doc = _json_object(body[:json_len])
    blob = memoryview(body)[json_len:]
    inputs = doc.get("inputs")
    if not isinstance(inputs, list) or len(inputs) != 1 or not isinstance(inputs[0], dict):
        raise ProtocolError(f"inputs: expected a list of one tensor ({INPUT!r}: the request payload), "
                            f"got {_short(inputs)}")
    tensor = inputs[0]
    input_name(tensor.get("name"))
    params = _params(tensor, "inputs[0].parameters")
    size = params.get("binary_data_size")
    if size is not None:
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= len(blob):
            raise ProtocolError(f"inputs[0].parameters.binary_data_size: expected an integer in [0, {len(blob)}] "
                                f"(the bytes after the JSON header), got {size!r}")
        if size != len(blob):
            raise ProtocolError(f"inputs[0].parameters.binary_data_size: {size} but {len(blob)} bytes follow the "
                                f"JSON header")
        payload = binary_tensor(tensor, bytes(blob))
    elif blob:
        raise ProtocolError(f"{len(blob)} bytes after the JSON header but no input has parameters.binary_data_size")
    else:
        payload = json_tensor(tensor)
    ctype = content_type(params.get("content_type"))
    rparams = _params(doc, "parameters")
    cid = doc.get("id")
    if cid is not None and not isinstance(cid, str):
        raise ProtocolError(f"id: expected a string, got {_short(cid)}")
    deadline_ms, accuracy_floor = call_parameters(rparams, headers)
    return InferCall(payload=payload, content_type=ctype, client_id=cid, deadline_ms=deadline_ms,
                     accuracy_floor=accuracy_floor, binary_output=_wants_binary(_outputs(doc), rparams))


def input_name(name: Any) -> None:
    """The model has one input, ``input``: any other name is refused, naming it."""
    if name != INPUT:
        raise ProtocolError(f"inputs[0].name: the model has no input {_short(name)} (its one input is {INPUT!r})")


def output_names(names: Iterable[Any], where: str = "outputs") -> None:
    """Requested outputs: the model has one, ``output``; any other name is refused, naming it."""
    for i, name in enumerate(names):
        if name != OUTPUT:
            raise ProtocolError(f"{where}[{i}].name: the model has no output {_short(name)} "
                                f"(its one output is {OUTPUT!r})")


def content_type(value: Any) -> str | None:
    """``inputs[0].parameters.content_type``: absent, or a non-empty string that UTF-8 can carry (a
    lone surrogate, which JSON's ``\\ud800`` escapes can spell, cannot be produced)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value or not _utf8(value):
        raise ProtocolError(f"inputs[0].parameters.content_type: expected a non-empty UTF-8 string, "
                            f"got {_short(value)}")
    return value


def call_parameters(params: Mapping, headers: Mapping[str, str]) -> tuple[float | None, float | None]:
    """Slipstream's request parameters, checked: ``deadline_ms`` and ``accuracy_floor`` (the body's
    ``parameters`` first, then the headers)."""
    return (_number(params, "deadline_ms", headers.get(DEADLINE_HEADER), DEADLINE_HEADER, 0, math.inf),
            _number(params, "accuracy_floor", headers.get(FLOOR_HEADER), FLOOR_HEADER, 0, 1))


def _header_length(value: str | None, body_len: int) -> int:
    if value is None:
        return body_len
    try:
        n = int(value)
    except ValueError:
        n = -1
    if not 0 <= n <= body_len:
        raise ProtocolError(f"{HEADER_LENGTH}: expected an integer in [0, {body_len}] (the body's length), "
                            f"got {_short(value)}")
    return n


def _json_object(raw: bytes | memoryview) -> dict:
    try:
        doc = json.loads(bytes(raw))
    except ValueError as exc:  # not JSON, not UTF-8, or an integer past the interpreter's digit limit
        raise ProtocolError(f"the request header is not JSON the gateway takes: {str(exc)[:200]}") from None
    if not isinstance(doc, dict):
        raise ProtocolError(f"the request header: expected a JSON object, got {_short(doc)}")
    return doc


def _params(obj: Mapping, where: str) -> Mapping[str, Any]:
    p = obj.get("parameters", {})
    if not isinstance(p, dict):
        raise ProtocolError(f"{where}: expected an object, got {_short(p)}")
    return p


def _shape(tensor: Mapping) -> tuple[int, ...]:
    shape = tensor.get("shape")
    if not isinstance(shape, list) or len(shape) > MAX_DIMS or not all(
            isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= INT64_MAX for d in shape):
        raise ProtocolError(f"inputs[0].shape: expected a list of at most {MAX_DIMS} non-negative int64 integers, "
                            f"got {_short(shape)}")
    return tuple(shape)


def _datatype(tensor: Mapping) -> str:
    dt = tensor.get("datatype")
    if not isinstance(dt, str) or (dt != "BYTES" and dt not in DTYPES):
        raise ProtocolError(f"inputs[0].datatype: expected BYTES or one of {', '.join(DTYPES)}, got {_short(dt)}")
    return dt


def json_tensor(tensor: Mapping) -> bytes:
    """The payload of a tensor given as ``data`` (JSON values; gRPC's typed contents)."""
    dt, shape = _datatype(tensor), _shape(tensor)
    data = tensor.get("data")
    if data is None:
        raise ProtocolError("inputs[0].data: required (or send the tensor as binary data)")
    if not isinstance(data, list):
        raise ProtocolError(f"inputs[0].data: expected a list (nested lists for a tensor), got {_short(data)}")
    flat = list(_flatten(data))
    if len(flat) != math.prod(shape):
        raise ProtocolError(f"inputs[0].data: {len(flat)} elements for shape {list(shape)}")
    if dt == "BYTES":
        if len(flat) != 1 or not isinstance(flat[0], str):
            raise ProtocolError(f"inputs[0].data: a BYTES input carries one string (the payload), got {_short(data)}")
        if not _utf8(flat[0]):
            raise ProtocolError("inputs[0].data: the string is not UTF-8 (a lone surrogate)")
        return flat[0].encode()
    for v in flat:
        if not _is_value(dt, v):
            raise ProtocolError(f"inputs[0].data: not {dt} values: {_short(v)} is not {_KINDS[dt[0]]}")
    try:
        return np.asarray(flat, dtype=DTYPES[dt]).tobytes()
    except (TypeError, ValueError, OverflowError) as exc:
        raise ProtocolError(f"inputs[0].data: not {dt} values: {exc}") from None


_KINDS = {"B": "true or false", "U": "an integer", "I": "an integer", "F": "a number"}


def _is_value(dt: str, v: Any) -> bool:
    """Whether a JSON leaf is a value of the datatype: a bool for BOOL, an integer for (U)INT, a number for FP
    (as Triton reads JSON tensors; a null, a string or an object is none of them)."""
    if dt == "BOOL" or isinstance(v, bool):
        return dt == "BOOL" and isinstance(v, bool)
    return isinstance(v, int) or (dt.startswith("FP") and isinstance(v, float))


def binary_tensor(tensor: Mapping, blob: bytes) -> bytes:
    """The payload of a tensor given as raw bytes (binary data; gRPC's raw contents)."""
    dt, shape = _datatype(tensor), _shape(tensor)
    if "data" in tensor:
        raise ProtocolError("inputs[0]: both data and parameters.binary_data_size")
    if dt == "BYTES":
        if math.prod(shape) != 1:
            raise ProtocolError(f"inputs[0].shape: a BYTES input carries one element, got {list(shape)}")
        if len(blob) < 4 or struct.unpack_from("<I", blob)[0] != len(blob) - 4:
            raise ProtocolError("inputs[0]: binary BYTES data is one element: a 4-byte little-endian length, "
                                f"then that many bytes (got {len(blob)} bytes)")
        return blob[4:]
    want = math.prod(shape) * np.dtype(DTYPES[dt]).itemsize
    if want != len(blob):
        raise ProtocolError(f"inputs[0]: {len(blob)} binary bytes for {dt} of shape {list(shape)} ({want} expected)")
    return blob


def _flatten(data: Any):
    """The leaves of nested lists in row-major order, without recursion (any depth JSON decodes)."""
    stack = [iter([data])]
    while stack:
        for d in stack[-1]:
            if isinstance(d, list):
                stack.append(iter(d))
                break
            yield d
        else:
            stack.pop()


def _utf8(s: str) -> bool:
    try:
        s.encode()
    except UnicodeEncodeError:
        return False
    return True


def _number(params: Mapping, key: str, header: str | None, header_name: str, lo: float, hi: float) -> float | None:
    where, v = f"parameters.{key}", params.get(key)
    if v is None and header is not None:
        where, v = header_name, header
        try:
            v = float(header)
        except ValueError:
            pass
    if v is None:
        return None
    f = _float(v)
    if f is None or not math.isfinite(f) or not lo <= f <= hi or (key == "deadline_ms" and f <= 0):
        rng = "a number > 0" if key == "deadline_ms" else f"a number in [{lo}, {hi}]"
        raise ProtocolError(f"{where}: expected {rng}, got {_short(v)}")
    return f


def _float(v: Any) -> float | None:
    """A JSON number as a double (an integer past a double's range: infinity); None if not a number."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        return float(v)
    except OverflowError:
        return math.inf


def _outputs(doc: Mapping) -> list[dict]:
    """The requested outputs (``outputs``): absent, or a list of objects naming ``output``."""
    outs = doc.get("outputs")
    if outs is None:
        return []
    if not isinstance(outs, list) or not all(isinstance(o, dict) for o in outs):
        raise ProtocolError(f"outputs: expected a list of objects, got {_short(outs)}")
    output_names((o.get("name") for o in outs))
    for i, o in enumerate(outs):
        _params(o, f"outputs[{i}].parameters")
    return outs


def _wants_binary(outs: list[dict], rparams: Mapping) -> bool:
    flags = [("parameters.binary_data_output", rparams.get("binary_data_output"))]
    flags += [(f"outputs[{i}].parameters.binary_data", o.get("parameters", {}).get("binary_data"))
              for i, o in enumerate(outs)]
    for where, flag in flags:
        if flag is not None and not isinstance(flag, bool):
            raise ProtocolError(f"{where}: expected true or false, got {_short(flag)}")
    return any(flag for _, flag in flags)


def _short(v: Any) -> str:
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 64:
        return f"an integer of {v.bit_length()} bits"
    s = json.dumps(v) if not isinstance(v, (bytes, bytearray)) else repr(v)
    return s if len(s) <= 80 else s[:77] + "..."


# ----------------------------------------------------------------------------------------------
# Responses


def hop_timings(hops: Sequence[HopTiming]) -> list[dict]:
    """Each HopTiming as it is, plus its split in ms: transit into the stage, queue and batch
    formation, service (``received_ns`` 0 in old records: transit and queue are one figure)."""
    out = []
    for h in hops:
        received = h.received_ns or h.started_ns
        out.append({**h.to_dict(), "transit_ms": (received - h.enqueued_ns) / 1e6,
                    "queue_ms": (h.started_ns - received) / 1e6,
                    "service_ms": (h.finished_ns - h.started_ns) / 1e6})
    return out


def result_code(status: str, reason: str) -> int:
    """The HTTP status of a result: 200 ``done``; 504 ``dropped`` (a deadline, an accuracy floor or a
    join the pipeline could not meet: the reason says which); 400 an ``error`` the request itself
    caused (it broke the data contract, or a stage's model refused its payload: the reason names the
    field and its value); 500 any other ``error`` (a model exception, a hung model, a delivery failure)."""
    if status == "done":
        return 200
    if status == "dropped":
        return 504
    return 400 if reason.startswith((contract.REASON_PREFIX, contract.BAD_INPUT_PREFIX)) else 500


def result_parameters(res: InferenceResult) -> dict:
    """A result's status, reason, timings and accuracy as response ``parameters``."""
    return {"request_id": res.request_id, "status": res.status, "reason": res.reason,
            "latency_ms": (res.finished_ns - res.created_ns) / 1e6,
            "deadline_ms": (res.deadline_ns - res.created_ns) / 1e6,
            "accuracy": res.accuracy, "content_type": res.content_type,
            "created_ns": res.created_ns, "deadline_ns": res.deadline_ns, "finished_ns": res.finished_ns,
            "hops": hop_timings(res.hops), **({"fields": f} if (f := contract.fields_in(res.reason)) else {})}


def is_text(content_type: str, data: bytes) -> bool:
    if not content_type.startswith(TEXT_TYPES):
        return False
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def infer_response(model: str, call: InferCall, res: InferenceResult) -> tuple[bytes, dict[str, str]]:
    """The response body and headers for a result: JSON, or JSON + binary output when the client
    asked for binary data or the output is not text."""
    out, ctype = res.output, res.content_type
    tensor: dict[str, Any] = {"name": OUTPUT, "datatype": "BYTES", "shape": [1],
                              "parameters": {"content_type": ctype}}
    binary = call.binary_output or not is_text(ctype, out)
    if binary:
        tensor["parameters"]["binary_data_size"] = 4 + len(out)
    else:
        tensor["data"] = [out.decode()]
    doc = {"model_name": model, "model_version": VERSION, "parameters": result_parameters(res), "outputs": [tensor]}
    if call.client_id is not None:
        doc["id"] = call.client_id
    head = json.dumps(doc).encode()
    if not binary:
        return head, {"Content-Type": "application/json"}
    return head + struct.pack("<I", len(out)) + out, {"Content-Type": "application/octet-stream",
                                                       HEADER_LENGTH: str(len(head))}


def error_body(message: str, **parameters: Any) -> bytes:
    """The protocol's error object, with Slipstream's details (status, reason, retry) beside it."""
    doc: dict[str, Any] = {"error": message}
    if parameters:
        doc["parameters"] = parameters
    return json.dumps(doc).encode()


def server_metadata() -> dict:
    """``GET /v2`` (and gRPC ``ServerMetadata``)."""
    return {"name": "slipstream", "version": "1", "extensions": ["binary_tensor_data"]}


def metadata(pipe) -> dict:
    """``GET /v2/models/{pipeline}``: the tensors, and in ``parameters`` the SLO and every stage's
    variants with their accuracy (from the pipeline spec)."""
    return {
        "name": pipe.name, "versions": [VERSION], "platform": "slipstream",
        "inputs": [{"name": INPUT, "datatype": "BYTES", "shape": [1],
                    "parameters": {"content_type": pipe.input_content_type}}],
        "outputs": [{"name": OUTPUT, "datatype": "BYTES", "shape": [1]}],
        "parameters": {
            "slo_ms": pipe.slo_ms, "source": pipe.source, "sinks": list(pipe.sinks),
            "stages": [{"name": s.name, "default_variant": s.defaults.variant,
                        "variants": [{"name": v.name, "model": v.model, "accuracy": v.accuracy} for v in s.variants]}
                       for s in pipe.stages],
            "request_parameters": {"deadline_ms": f"latency budget, capped by slo_ms (header {DEADLINE_HEADER})",
                                   "accuracy_floor": f"lowest variant accuracy accepted (header {FLOOR_HEADER})"},
        },
    }
