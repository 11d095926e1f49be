"""The gateway client's HTTP mapping, against the server's own decode and encode (``slipstream.gateway.oip``):
a request the client builds is the call the server reads; every answer the server gives is the
client's result or exception."""
import json
from dataclasses import replace

import pytest

from slipstream.gateway import client, oip
from slipstream.schemas.records import InferenceResult
from slipstream.streams import contract
from slipstream.gateway.client import GatewayError, Shed, answer_result, infer_body

from .test_oip import result


def test_the_request_the_client_builds_is_the_call_the_server_reads():
    payload = bytes(range(256)) * 3
    raw, headers = infer_body(payload, "image/png", "c7", deadline_ms=120, accuracy_floor=0.75)
    call = oip.parse_infer(raw, headers)
    assert call.payload == payload and call.content_type == "image/png" and call.client_id == "c7"
    assert call.deadline_ms == 120 and call.accuracy_floor == 0.75
    call = oip.parse_infer(*infer_body(b""))
    assert call.payload == b"" and call.content_type is None and call.deadline_ms is None and call.accuracy_floor is None


@pytest.mark.parametrize("output,ctype", [(b'{"top5": [[1, 0.9]]}', "application/json"),
                                          (b"\xff\x00raw", "application/octet-stream")])
def test_a_done_answer_is_the_result_text_or_binary(output, ctype):
    res = result(output, ctype)
    raw, headers = oip.infer_response("p", oip.parse_infer(*infer_body(b"x", client_id="c1")), res)
    got = answer_result(200, raw, headers)
    answered = set(InferenceResult.avro_fields) - {"parts", "fragment", "path"}  # less the join's bookkeeping
    assert {k: getattr(got, k) for k in answered} == {k: getattr(res, k) for k in answered}
    assert isinstance(got, InferenceResult) and got.output == output and got.hops[0].started_ns == 4_000_000


@pytest.mark.parametrize("code,status", [(504, "dropped"), (500, "error")])
def test_a_dropped_or_error_answer_is_a_result_with_its_reason(code, status):
    res = replace(result(), status=status, reason="deadline: 3.0 ms past", output=b"")
    raw = oip.error_body(f"{status}: {res.reason}", **oip.result_parameters(res))
    got = answer_result(code, raw, {"Content-Type": "application/json"})
    assert (got.status, got.reason, got.output) == (status, "deadline: 3.0 ms past", b"")


def test_refusals_raise_shed_timeout_or_gateway_error():
    with pytest.raises(Shed) as shed:
        answer_result(429, oip.error_body("shed: predicted 900 ms > budget 500 ms", retry_after_s=3), {"Retry-After": "3"})
    assert shed.value.retry_after_s == 3 and shed.value.code == 429
    with pytest.raises(TimeoutError, match="no result within"):
        answer_result(504, oip.error_body("no result within the deadline", status="pending", request_id="r"), {})
    with pytest.raises(GatewayError) as bad:
        answer_result(400, oip.error_body("inputs[0].shape: expected a list of non-negative integers, got [-1]"), {})
    assert bad.value.code == 400 and "inputs[0].shape" in bad.value.message
    with pytest.raises(GatewayError, match="502"):  # not the protocol's JSON at all (a proxy's page)
        answer_result(502, b"<html>Bad Gateway</html>", {})


def test_a_result_code_without_its_status_is_not_taken_for_a_result():
    with pytest.raises(GatewayError):  # a 500 from something else than an error result
        answer_result(500, json.dumps({"error": "boom"}).encode(), {})


def test_connect_chooses_the_path():
    class Pipe:
        name, source, input_content_type = "p", "s", "text/plain"

    assert isinstance(client.connect(Pipe(), None, "http://127.0.0.1:1/"), client.GatewayClient)
    assert client.connect(Pipe(), None, "http://127.0.0.1:1/").infer_url == "http://127.0.0.1:1/v2/models/p/infer"
    assert type(client.connect(Pipe(), None)).__name__ == "PipelineClient"


def test_a_contract_error_is_a_400_result_naming_the_field():
    reason = "contract: payload=<9 bytes>: over 8 bytes"
    res = replace(result(), status="error", reason=reason, output=b"")
    got = answer_result(400, oip.error_body(f"error: {reason}", **oip.result_parameters(res)), {})
    assert (got.status, contract.fields_in(got.reason)) == ("error", ["payload"])
    with pytest.raises(GatewayError):  # the same reason answered 500 is not what the server says of it
        answer_result(500, oip.error_body(f"error: {reason}", **oip.result_parameters(res)), {})
