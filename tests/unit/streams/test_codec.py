import pytest

from streams import codec
from streams.codec import CodecError

REQ = {"request_id": "a", "pipeline": "p", "created_ns": 1, "deadline_ns": 2,
       "content_type": "text/plain", "payload": b"hi"}


def test_round_trip_fills_defaults_and_uses_single_object_header():
    data = codec.encode("InferenceRequest", REQ)
    assert data[:2] == b"\xc3\x01"
    v = codec.decode("InferenceRequest", data)
    assert v["request_id"] == "a" and v["hops"] == [] and v["accuracy_floor"] is None


@pytest.mark.parametrize("data, match", [
    (None, "empty record"),
    (b"", "got nothing"),
    (b"{\"json\": 1}xxxxxxx", "single-object header"),
])
def test_bad_bytes_named(data, match):
    with pytest.raises(CodecError, match=match):
        codec.decode("InferenceRequest", data)


def test_wrong_record_type_and_trailing_bytes_rejected():
    data = codec.encode("InferenceRequest", REQ)
    with pytest.raises(CodecError, match="trailing bytes"):
        codec.decode("InferenceRequest", data + b"\x00")
    cfg = codec.encode("DeadLetter", {"original": b"x", "topic": "t", "partition": 0, "offset": 1, "error": "e"})
    with pytest.raises(CodecError):
        codec.decode("InferenceRequest", cfg)  # unknown fingerprint: read as prefix, and it fails


def test_encode_error_names_the_problem():
    with pytest.raises(CodecError, match="cannot encode InferenceRequest"):
        codec.encode("InferenceRequest", {"request_id": "a"})


def test_faust_codec_registered_round_trip():
    from faust.serializers import codecs as fc
    codec.register_with_faust()
    c = fc.get_codec("avro-inferencerequest")
    assert c.loads(c.dumps(REQ))["payload"] == b"hi"
