"""Malformed and hostile requests to the gateway's REST API, each with the status it must answer.

Every case is answered with its 4xx status and the protocol's error body (``{"error": "..."}``, JSON),
never a 5xx and never plain text: driven through the in-process server in
``tests/unit/gateway/test_hostile_requests.py`` and through a real gateway process on the broker in
``tests/integration/test_gateway_tritonclient.py``. ``{model}`` in a path is the served model's name.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

HEADER_LENGTH = "Inference-Header-Content-Length"
BIG = int("9" * 400)  # past a double: math.isfinite(BIG) raises OverflowError
HUGE = "9" * 5000  # past Python's int-digits limit (4300): json.loads raises ValueError


@dataclass(frozen=True)
class Case:
    name: str
    status: int
    method: str = "POST"
    path: str = "/v2/models/{model}/infer"
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    says: str = ""  # in the error message (the field it names)


def tensor(**over) -> dict:
    return {"name": "input", "shape": [1], "datatype": "BYTES", "data": ["x"], **over}


def infer(*inputs: dict, **top) -> bytes:
    return json.dumps({"inputs": list(inputs) or [tensor()], **top}).encode()


def raw_json(text: str) -> bytes:
    """A body written as JSON text by hand (what json.dumps would refuse or escape)."""
    return text.encode("utf-8", "surrogatepass")


def binary(head: dict, blob: bytes, **headers: str) -> tuple[bytes, dict[str, str]]:
    h = json.dumps(head).encode()
    return h + blob, {HEADER_LENGTH: str(len(h)), **headers}


def nested(depth: int, leaf: str = "1") -> str:
    return "[" * depth + leaf + "]" * depth


VALID = infer()

_bin_uint8, _bin_uint8_h = binary({"inputs": [{"name": "input", "shape": [3], "datatype": "UINT8",
                                               "parameters": {"binary_data_size": 4}}]}, b"abcd")
_bin_bytes, _bin_bytes_h = binary({"inputs": [{"name": "input", "shape": [1], "datatype": "BYTES",
                                               "parameters": {"binary_data_size": 6}}]}, b"\x09\x00\x00\x00ab")
_big_size, _big_size_h = binary({"inputs": [{"name": "input", "shape": [1], "datatype": "UINT8",
                                               "parameters": {"binary_data_size": BIG}}]}, b"x")
_both, _both_h = binary({"inputs": [{**tensor(), "parameters": {"binary_data_size": 1}}]}, b"x")

CASES: list[Case] = [
    # routes and methods the protocol does not have
    Case("unknown route", 404, "GET", "/nope", says="no route /nope"),
    Case("unknown route under a model", 404, "GET", "/v2/models/{model}/nope"),
    Case("unknown route under v2", 404, "POST", "/v2/repository/index", b"{}"),
    Case("GET on infer", 405, "GET", "/v2/models/{model}/infer", says="method GET not allowed"),
    Case("POST on live", 405, "POST", "/v2/health/live", b"{}"),
    Case("DELETE on server metadata", 405, "DELETE", "/v2"),
    Case("PUT on model metadata", 405, "PUT", "/v2/models/{model}", b"{}"),
    Case("GET on a versioned infer", 405, "GET", "/v2/models/{model}/versions/1/infer"),
    # models and versions the gateway does not serve
    Case("metadata of another model", 404, "GET", "/v2/models/other"),
    Case("readiness of another model", 404, "GET", "/v2/models/other/ready", says="no model 'other'"),
    Case("infer on another model", 404, "POST", "/v2/models/other/infer", VALID),
    Case("metadata of version 2", 404, "GET", "/v2/models/{model}/versions/2"),
    Case("readiness of version 2", 404, "GET", "/v2/models/{model}/versions/2/ready"),
    Case("infer on version 2", 404, "POST", "/v2/models/{model}/versions/2/infer", VALID, says="no version '2'"),
    Case("versioned readiness of another model", 404, "GET", "/v2/models/other/versions/1/ready"),
    # the body is not a JSON object the protocol takes
    Case("empty body", 400),
    Case("not JSON", 400, body=b"not json"),
    Case("not UTF-8", 400, body=b'{"inputs": "\xff\xfe"}'),
    Case("a JSON array", 400, body=b"[]"),
    Case("JSON nested 100,000 deep", 400, body=raw_json('{"inputs": ' + nested(100_000) + "}"), says="nested too deep"),
    Case("a 5,000-digit integer in the shape", 400, body=raw_json(
        '{"inputs": [{"name": "input", "shape": [' + HUGE + '], "datatype": "BYTES", "data": ["x"]}]}'), says="digits"),
    Case("a 5,000-digit integer in an unknown field", 400, body=raw_json(
        '{"inputs": [{"name": "input", "shape": [1], "datatype": "BYTES", "data": ["x"]}], "x": ' + HUGE + "}")),
    # inputs
    Case("no inputs", 400, body=b"{}"),
    Case("inputs not a list", 400, body=b'{"inputs": {"name": "input"}}'),
    Case("two inputs", 400, body=infer(tensor(), tensor())),
    Case("an input the model lacks", 400, body=infer(tensor(name="image")),
         says='inputs[0].name: the model has no input "image"'),
    Case("an input without a name", 400, body=infer({k: v for k, v in tensor().items() if k != "name"})),
    Case("an input name that is an object", 400, body=infer(tensor(name={}))),
    Case("datatype an object", 400, body=infer(tensor(datatype={})), says="inputs[0].datatype"),
    Case("datatype a list", 400, body=infer(tensor(datatype=[]))),
    Case("datatype null", 400, body=infer(tensor(datatype=None))),
    Case("datatype unknown", 400, body=infer(tensor(datatype="STRING"))),
    Case("shape negative", 400, body=infer(tensor(shape=[-1]))),
    Case("shape a string", 400, body=infer(tensor(shape="1"))),
    Case("shape of booleans", 400, body=infer(tensor(shape=[True]))),
    Case("shape a 400-digit integer", 400, body=infer(tensor(shape=[BIG]))),
    Case("shape past int64", 400, body=infer(tensor(datatype="UINT8", shape=[2**63, 0], data=[])),
         says="inputs[0].shape"),
    Case("data count not the shape's", 400, body=infer(tensor(datatype="INT32", shape=[3], data=[1, 2]))),
    Case("data nested 900 deep", 400, body=raw_json(
        '{"inputs": [{"name": "input", "shape": [2], "datatype": "INT32", "data": ' + nested(900) + "}]}")),
    Case("data missing", 400, body=infer({k: v for k, v in tensor().items() if k != "data"})),
    Case("data not INT8", 400, body=infer(tensor(datatype="INT8", data=["x"]))),
    Case("data past INT8", 400, body=infer(tensor(datatype="INT8", data=[1000]))),
    Case("data a 400-digit integer", 400, body=infer(tensor(datatype="UINT64", data=[BIG]))),
    Case("BYTES data not one string", 400, body=infer(tensor(data=[1]))),
    Case("BYTES data a lone surrogate", 400, body=raw_json(
        '{"inputs": [{"name": "input", "shape": [1], "datatype": "BYTES", "data": ["\\ud800"]}]}'),
         says="inputs[0].data"),
    Case("input parameters a string", 400, body=infer(tensor(parameters="x"))),
    Case("content_type an object", 400, body=infer(tensor(parameters={"content_type": {}}))),
    Case("content_type empty", 400, body=infer(tensor(parameters={"content_type": ""}))),
    Case("content_type a lone surrogate", 400, body=raw_json(
        '{"inputs": [{"name": "input", "shape": [1], "datatype": "BYTES", "data": ["x"], '
        '"parameters": {"content_type": "text/\\udc80plain"}}]}'), says="inputs[0].parameters.content_type"),
    # requested outputs
    Case("an output the model lacks", 400, body=infer(outputs=[{"name": "logits"}]), says='outputs[0].name'),
    Case("outputs not a list", 400, body=infer(outputs={"name": "output"})),
    Case("an output that is a string", 400, body=infer(outputs=["output"])),
    # request fields and Slipstream's parameters
    Case("id a number", 400, body=infer(id=7)),
    Case("parameters a list", 400, body=infer(parameters=[])),
    Case("deadline_ms a 400-digit integer", 400, body=infer(parameters={"deadline_ms": BIG}),
         says="parameters.deadline_ms"),
    Case("accuracy_floor a 400-digit integer", 400, body=infer(parameters={"accuracy_floor": BIG}),
         says="parameters.accuracy_floor"),
    Case("deadline_ms a 5,000-digit integer", 400, body=raw_json(
        '{"inputs": [{"name": "input", "shape": [1], "datatype": "BYTES", "data": ["x"]}], '
        '"parameters": {"deadline_ms": ' + HUGE + "}}")),
    Case("deadline_ms a string", 400, body=infer(parameters={"deadline_ms": "soon"})),
    Case("deadline_ms NaN", 400, body=raw_json(
        '{"inputs": [{"name": "input", "shape": [1], "datatype": "BYTES", "data": ["x"]}], '
        '"parameters": {"deadline_ms": NaN}}')),
    Case("deadline_ms 1e999", 400, body=raw_json(
        '{"inputs": [{"name": "input", "shape": [1], "datatype": "BYTES", "data": ["x"]}], '
        '"parameters": {"deadline_ms": 1e999}}')),
    Case("deadline_ms true", 400, body=infer(parameters={"deadline_ms": True})),
    Case("deadline_ms zero", 400, body=infer(parameters={"deadline_ms": 0})),
    Case("accuracy_floor below 0", 400, body=infer(parameters={"accuracy_floor": -0.1})),
    Case("deadline header not a number", 400, body=VALID, headers={"Slipstream-Deadline-Ms": "abc"}),
    Case("deadline header 400 digits", 400, body=VALID, headers={"Slipstream-Deadline-Ms": "9" * 400}),
    Case("floor header NaN", 400, body=VALID, headers={"Slipstream-Accuracy-Floor": "nan"}),
    # the binary-data extension
    Case("header length not a number", 400, body=VALID, headers={HEADER_LENGTH: "abc"}),
    Case("header length 5,000 digits", 400, body=VALID, headers={HEADER_LENGTH: HUGE}),
    Case("header length negative", 400, body=VALID, headers={HEADER_LENGTH: "-1"}),
    Case("header length past the body", 400, body=VALID, headers={HEADER_LENGTH: "99999"}),
    Case("bytes after JSON, no binary_data_size", 400, body=VALID + b"tail", headers={HEADER_LENGTH: str(len(VALID))}),
    Case("binary bytes not the shape's", 400, body=_bin_uint8, headers=_bin_uint8_h),
    Case("binary_data_size a 400-digit integer", 400, body=_big_size, headers=_big_size_h),
    Case("binary BYTES with a wrong length prefix", 400, body=_bin_bytes, headers=_bin_bytes_h),
    Case("both data and binary_data_size", 400, body=_both, headers=_both_h),
    Case("a body over 8 MiB", 413, body=b" " * (8 * 1024 * 1024 + 1)),
]
