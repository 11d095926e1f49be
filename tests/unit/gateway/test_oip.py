"""Open Inference Protocol V2 decode and encode: JSON tensors, the binary-data extension, Slipstream's
parameters and headers, and errors that name the field."""
import json
import struct
from dataclasses import replace

import numpy as np
import pytest

from slipstream.gateway import oip
from slipstream.schemas.records import InferenceResult
from slipstream.streams import contract
from slipstream.streams.spec import parse_pipeline

H = oip.HEADER_LENGTH


def body(inputs, **top) -> bytes:
    return json.dumps({"inputs": inputs, **top}).encode()


def bytes_input(text="hello", **params):
    return {"name": "input", "shape": [1], "datatype": "BYTES", "data": [text], **({"parameters": params} if params else {})}


def test_a_json_bytes_input_is_the_payload_and_parameters_set_deadline_and_floor():
    call = oip.parse_infer(body([bytes_input("héllo", content_type="text/plain")], id="c1",
                                parameters={"deadline_ms": 120, "accuracy_floor": 0.76}), {})
    assert call.payload == "héllo".encode() and call.content_type == "text/plain" and call.client_id == "c1"
    assert call.deadline_ms == 120.0 and call.accuracy_floor == 0.76 and not call.binary_output


def test_headers_set_deadline_and_floor_when_the_body_does_not():
    call = oip.parse_infer(body([bytes_input()]), {oip.DEADLINE_HEADER: "50", oip.FLOOR_HEADER: "0.5"})
    assert (call.deadline_ms, call.accuracy_floor) == (50.0, 0.5)
    call = oip.parse_infer(body([bytes_input()], parameters={"deadline_ms": 70}), {oip.DEADLINE_HEADER: "50"})
    assert call.deadline_ms == 70.0  # the body wins


def test_the_budget_is_capped_by_the_slo():
    assert oip.budget_ms(None, 400) == 400 and oip.budget_ms(50, 400) == 50 and oip.budget_ms(5000, 400) == 400


def test_numeric_json_tensors_are_packed_little_endian():
    call = oip.parse_infer(body([{"name": "input", "shape": [2, 2], "datatype": "FP32", "data": [[1, 2], [3, 4.5]]}]), {})
    assert np.frombuffer(call.payload, "<f4").tolist() == [1, 2, 3, 4.5]


def test_binary_data_extension_uint8_and_length_prefixed_bytes():
    image = bytes(range(256)) * 3
    head = json.dumps({"inputs": [{"name": "input", "shape": [len(image)], "datatype": "UINT8",
                                   "parameters": {"binary_data_size": len(image)}}]}).encode()
    call = oip.parse_infer(head + image, {H: str(len(head))})
    assert call.payload == image
    blob = struct.pack("<I", 5) + b"\x00\x01bin"
    head = json.dumps({"inputs": [{"name": "input", "shape": [1], "datatype": "BYTES",
                                   "parameters": {"binary_data_size": len(blob)}}],
                       "outputs": [{"name": "output", "parameters": {"binary_data": True}}]}).encode()
    call = oip.parse_infer(head + blob, {H: str(len(head))})
    assert call.payload == b"\x00\x01bin" and call.binary_output


@pytest.mark.parametrize("raw, headers, names", [
    (b"not json", {}, "not JSON"),
    (body([]), {}, "inputs: expected a list of one tensor"),
    (body([bytes_input(), bytes_input()]), {}, "inputs: expected a list of one tensor"),
    (body([{**bytes_input(), "datatype": "STRING"}]), {}, "inputs[0].datatype"),
    (body([{**bytes_input(), "shape": [-1]}]), {}, "inputs[0].shape"),
    (body([{"name": "input", "shape": [3], "datatype": "INT32", "data": [1, 2]}]), {}, "2 elements for shape [3]"),
    (body([{"name": "input", "shape": [1], "datatype": "INT8", "data": ["x"]}]), {}, "not INT8 values"),
    (body([{"name": "input", "shape": [], "datatype": "BOOL", "data": [None]}]), {}, "null is not true or false"),
    (body([{"name": "input", "shape": [1], "datatype": "BOOL", "data": [1]}]), {}, "1 is not true or false"),
    (body([{"name": "input", "shape": [2], "datatype": "FP32", "data": [1, None]}]), {}, "null is not a number"),
    (body([{"name": "input", "shape": [1], "datatype": "UINT8", "data": [True]}]), {}, "true is not an integer"),
    (body([{"name": "input", "shape": [1], "datatype": "INT64", "data": [1.5]}]), {}, "1.5 is not an integer"),
    (body([{**bytes_input(), "data": "x"}]), {}, "inputs[0].data: expected a list"),
    (body([bytes_input()], parameters={"binary_data_output": "yes"}), {}, "binary_data_output: expected true or false"),
    (json.dumps({"inputs": [bytes_input()], "outputs": [{"name": "output", "parameters": {"binary_data": 1}}]}).encode(),
     {}, "outputs[0].parameters.binary_data: expected true or false"),
    (body([bytes_input()], parameters={"deadline_ms": -5}), {}, "parameters.deadline_ms: expected a number > 0"),
    (body([bytes_input()]), {oip.FLOOR_HEADER: "1.5"}, "Slipstream-Accuracy-Floor: expected a number in [0, 1]"),
    (body([bytes_input()]), {H: "99999"}, "Inference-Header-Content-Length"),
    (body([bytes_input()]) + b"extra", {H: str(len(body([bytes_input()])))}, "no input has parameters.binary_data_size"),
])
def test_bad_requests_name_the_field(raw, headers, names):
    with pytest.raises(oip.ProtocolError, match=None) as err:
        oip.parse_infer(raw, headers)
    assert names in str(err.value)


def result(output=b'{"top5": [[1, 0.9]]}', ctype="application/json"):
    hop = {"stage": "s", "variant": "v", "batch_size": 2, "enqueued_ns": 1_000_000, "received_ns": 3_000_000,
           "started_ns": 4_000_000, "finished_ns": 9_000_000, "worker": "w", "model_digest": ""}
    return InferenceResult.from_dict({
        "request_id": "r1", "pipeline": "p", "status": "done", "reason": "", "created_ns": 1_000_000,
        "deadline_ns": 401_000_000, "finished_ns": 10_000_000, "content_type": ctype, "output": output,
        "hops": [hop], "accuracy": 0.75, "parts": 1, "fragment": "1", "path": []})


def test_a_text_result_answers_json_with_status_and_hop_timings():
    call = oip.parse_infer(body([bytes_input()], id="c1"), {})
    raw, headers = oip.infer_response("p", call, result())
    doc = json.loads(raw)
    assert headers["Content-Type"] == "application/json" and doc["id"] == "c1"
    assert doc["outputs"][0]["data"] == ['{"top5": [[1, 0.9]]}']
    p = doc["parameters"]
    assert p["status"] == "done" and p["latency_ms"] == pytest.approx(9.0) and p["deadline_ms"] == pytest.approx(400.0)
    (hop,) = p["hops"]
    assert (hop["transit_ms"], hop["queue_ms"], hop["service_ms"]) == pytest.approx((2.0, 1.0, 5.0))


def test_a_binary_result_answers_with_the_binary_data_extension():
    call = oip.parse_infer(body([bytes_input()]), {})
    raw, headers = oip.infer_response("p", call, result(b"\xff\x00raw", "application/octet-stream"))
    n = int(headers[H])
    doc = json.loads(raw[:n])
    assert doc["outputs"][0]["parameters"]["binary_data_size"] == 4 + 5
    assert raw[n:] == struct.pack("<I", 5) + b"\xff\x00raw"


def test_metadata_lists_slo_and_variants_with_accuracy():
    pipe = parse_pipeline({"name": "p", "slo_ms": 300, "hardware": {"c": {"kind": "cpu", "cost_per_hour": 0.1}},
                           "stages": [{"name": "s", "variants": [{"name": "a", "model": "noop", "accuracy": 0.7},
                                                                 {"name": "b", "model": "noop", "accuracy": 0.8}]}]})
    md = oip.metadata(pipe)
    assert md["name"] == "p" and md["parameters"]["slo_ms"] == 300
    assert [v["accuracy"] for v in md["parameters"]["stages"][0]["variants"]] == [0.7, 0.8]


def test_a_result_maps_to_its_http_status_and_a_contract_error_names_its_fields():
    assert oip.result_code("done", "") == 200 and oip.result_code("dropped", "deadline: 3 ms past") == 504
    assert oip.result_code("error", "model error in s/v: ValueError: x") == 500
    assert oip.result_code("error", "bad input: not an image (cannot identify image file)") == 400
    reason = contract.describe([contract.Violation("payload", b"x" * 9, "over 8 bytes"),
                                contract.Violation("content_type", "a;b", "not a media type")])
    assert oip.result_code("error", reason) == 400
    params = oip.result_parameters(replace(result(), status="error", reason=reason))
    assert params["fields"] == ["payload", "content_type"]
    assert "fields" not in oip.result_parameters(result())
