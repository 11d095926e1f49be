"""The gRPC transport's pure parts: a ModelInferRequest decodes to the call REST decodes (raw and typed
contents, parameters, the call's own deadline), errors name the field, a result encodes as a
ModelInferResponse; and the committed stubs are what grpcio-tools makes of the committed .proto."""
import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from slipstream.gateway import grpc_server as gs, oip
from slipstream.gateway.core import Gateway
from slipstream.streams.config import KafkaSettings
from slipstream.gateway.grpc_v2 import grpc_predict_v2_pb2 as pb

from .test_hostile_requests import PIPE
from .test_oip import result

ROOT = Path(__file__).resolve().parents[3]


def request(datatype="UINT8", shape=(3,), raw=b"abc", **params) -> pb.ModelInferRequest:
    req = pb.ModelInferRequest(model_name="p", id="c1")
    t = req.inputs.add(name="input", datatype=datatype, shape=list(shape))
    t.parameters["content_type"].string_param = "image/png"
    if raw is not None:
        req.raw_input_contents.append(raw)
    for k, v in params.items():
        gs._set(req.parameters[k], v)
    return req


def test_raw_and_typed_contents_decode_to_the_payload_and_parameters():
    call = gs.parse_infer(request(deadline_ms=120, accuracy_floor=0.75))
    assert (call.payload, call.content_type, call.client_id) == (b"abc", "image/png", "c1")
    assert (call.deadline_ms, call.accuracy_floor) == (120.0, 0.75)
    assert gs.parse_infer(request(accuracy_floor="0.5")).accuracy_floor == 0.5  # KServe has no double
    assert gs.parse_infer(request("BYTES", (1,), struct.pack("<I", 5) + b"hello")).payload == b"hello"
    req = request("BYTES", (1,), None)
    req.inputs[0].contents.bytes_contents.append(b"typed")
    assert gs.parse_infer(req).payload == b"typed"
    req = request("FP32", (2,), None)
    req.inputs[0].contents.fp32_contents.extend([1.5, -2.0])
    assert gs.parse_infer(req).payload == np.array([1.5, -2.0], "<f4").tobytes()


def test_the_calls_own_deadline_is_the_budget_unless_a_parameter_sets_it():
    assert gs.parse_infer(request(), time_remaining_s=0.25).deadline_ms == pytest.approx(250.0)
    assert gs.parse_infer(request(deadline_ms=40), time_remaining_s=0.25).deadline_ms == 40.0
    assert gs.parse_infer(request()).deadline_ms is None


def renamed(name: str) -> pb.ModelInferRequest:
    req = request()
    req.inputs[0].name = name
    return req


def wanting(output: str) -> pb.ModelInferRequest:
    req = request()
    req.outputs.add(name=output)
    return req


@pytest.mark.parametrize("req,names", [
    (renamed("image"), 'inputs[0].name: the model has no input "image"'),
    (wanting("logits"), 'outputs[0].name: the model has no output "logits"'),
    (request(raw=b"abcd"), "inputs[0]: 4 binary bytes"),
    (request(accuracy_floor=1.5), "parameters.accuracy_floor"),
    (request(deadline_ms="soon"), "parameters.deadline_ms"),
    (request("FP99"), "inputs[0].datatype"),
    (pb.ModelInferRequest(model_name="p"), "inputs: expected one tensor"),
])
def test_bad_requests_name_the_field(req, names):
    with pytest.raises(oip.ProtocolError) as err:
        gs.parse_infer(req)
    assert names in str(err.value)


def test_a_result_encodes_as_a_model_infer_response():
    res = result(b"\xff\x00raw", "application/octet-stream")
    out = gs.infer_response("p", gs.parse_infer(request()), res)
    assert out.id == "c1" and out.outputs[0].name == "output" and out.outputs[0].datatype == "BYTES"
    assert out.raw_output_contents[0] == struct.pack("<I", 5) + b"\xff\x00raw"
    p = {k: getattr(v, v.WhichOneof("parameter_choice")) for k, v in out.parameters.items()}
    assert p["status"] == "done" and p["request_id"] == "r1" and p["latency_ms"] == pytest.approx(9.0)
    assert p["created_ns"] == 1_000_000 and json.loads(p["hops"])[0]["service_ms"] == pytest.approx(5.0)


def test_the_committed_stubs_are_generated_from_the_committed_proto(tmp_path):
    pytest.importorskip("grpc_tools")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-Igateway/grpc_v2=gateway/grpc_v2",
                    f"--python_out={tmp_path}", f"--grpc_python_out={tmp_path}", "gateway/grpc_v2/grpc_predict_v2.proto"],
                   cwd=ROOT, check=True)
    for name in ("grpc_predict_v2_pb2.py", "grpc_predict_v2_pb2_grpc.py"):
        assert (tmp_path / "gateway/grpc_v2" / name).read_text() == (ROOT / "gateway/grpc_v2" / name).read_text(), \
            f"gateway/grpc_v2/{name} is stale: regenerate it (the command is in grpc_predict_v2.proto)"


async def test_model_ready_and_metadata_serve_the_pipeline_at_version_1_only():
    gw = Gateway(PIPE, KafkaSettings.from_env({}))
    gw.not_ready = lambda: None
    svc = gs.InferenceService(gw)
    for name, version, ready in (("p", "", True), ("p", "1", True), ("p", "2", False), ("other", "", False)):
        answer = await svc.ModelReady(pb.ModelReadyRequest(name=name, version=version), None)
        assert answer.ready is ready, (name, version)
    assert gs.parse_infer(wanting("output")).payload == b"abc"
