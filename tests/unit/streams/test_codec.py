import pytest

from slipstream.streams import codec
from slipstream.streams.codec import CodecError

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


# ----------------------------------------------------------------------------------------------
# Legacy fingerprints: what the codec wrote before it followed the specification stays readable.

import json  # noqa: E402
import logging  # noqa: E402
import struct  # noqa: E402
from pathlib import Path  # noqa: E402

from slipstream import schemas  # noqa: E402
from tests.wire_samples import SAMPLES  # noqa: E402

LEGACY = json.loads((Path(__file__).parents[2] / "data" / "legacy_records.json").read_text())["records"]


def old_fingerprint(file: str) -> str:
    """The pre-spec algorithm: fastavro's canonical form with HopTiming by name, packed big-endian."""
    import fastavro
    from fastavro.schema import fingerprint, to_parsing_canonical_form

    named: dict = {}
    doc = schemas.read(file)
    if doc["name"] != "HopTiming":
        hop = doc.get("x-nested", {}).get("HopTiming")
        fastavro.parse_schema(schemas.read(hop) if hop else schemas.raw("HopTiming"), named_schemas=named)
    parsed = fastavro.parse_schema(doc, named_schemas=named)
    return struct.pack("<Q", int(fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"), 16)).hex()


def test_legacy_table_holds_the_old_fingerprint_of_the_file_it_names():
    """Fails when a schema listed here is edited in place: move the old one to schemas/history/ and
    point its entry there."""
    assert {old_fingerprint(file): file for file in schemas.LEGACY_FINGERPRINTS.values()} \
        == schemas.LEGACY_FINGERPRINTS
    assert {f.rsplit("/", 1)[-1].split(".")[0] for f in schemas.LEGACY_FINGERPRINTS.values()} \
        == set(schemas.NAMES)


def older(record: str, value: dict, **hop_defaults) -> dict:
    """``value`` as a reader sees it when written before HopTiming.model_digest,
    StageConfig.digests and TunerHandoff.capacity and .host (and before the hop fields in ``hop_defaults``):
    their defaults filled."""
    hop = {"model_digest": "", **hop_defaults}
    if record == "HopTiming":
        return {**value, **hop}
    if record == "StageConfig":
        return {**value, "digests": {}}
    if record == "TunerHandoff":
        return {**value, "capacity": [], "host": None}
    if "hops" in value:
        return {**value, "hops": [{**h, **hop} for h in value["hops"]]}
    return value


@pytest.mark.parametrize("name", sorted(LEGACY))
def test_records_written_with_legacy_fingerprints_decode_exactly(name, caplog):
    record, _, generation = name.partition(".")
    expected = SAMPLES[record]
    if generation:  # InferenceResult.v1: no fragment/path, the reader fills their defaults
        expected = {**expected, "fragment": "1", "path": []}
    expected = older(record, expected, received_ns=0)  # written before received_ns too
    data = bytes.fromhex(LEGACY[name])
    with caplog.at_level(logging.WARNING, logger="slipstream.streams.codec"):
        assert codec.decode(record, data) == expected
        with pytest.raises(CodecError, match="trailing bytes"):  # read as a known writer, exactly
            codec.decode(record, data + b"\x00")
    assert not caplog.records


def test_new_records_carry_the_standard_fingerprint_not_a_legacy_one():
    for record, value in SAMPLES.items():
        assert codec.encode(record, value)[2:10].hex() not in schemas.LEGACY_FINGERPRINTS


# ----------------------------------------------------------------------------------------------
# The previous generation: records the codec wrote before HopTiming.model_digest and
# StageConfig.digests (tests/data/previous_generation_records.json) stay readable, exactly.

PREVIOUS = json.loads((Path(__file__).parents[2] / "data" / "previous_generation_records.json").read_text())


@pytest.mark.parametrize("record", sorted(PREVIOUS["records"]))
def test_records_of_the_previous_generation_decode_exactly(record, caplog):
    data = bytes.fromhex(PREVIOUS["records"][record])
    assert codec.encode(record, SAMPLES[record])[2:10] != data[2:10], "the schema did not change"
    with caplog.at_level(logging.WARNING, logger="slipstream.streams.codec"):
        assert codec.decode(record, data) == older(record, SAMPLES[record])
        with pytest.raises(CodecError, match="trailing bytes"):  # a known writer, read exactly
            codec.decode(record, data + b"\x00")
    assert not caplog.records


# A TunerHandoff written before ``capacity`` (schemas/history/TunerHandoff.v1.avsc): the codec at
# commit 25dd28c encoding tests/wire_samples.py's TunerHandoff.
HANDOFF_V1 = ("c301297ff1c16ecbdcee1c696d6167652d636c6173736966790e0000000000003240049a9999999999b93f000000000000f03f"
              "000400000000000054400000000000003e40000210636c617373696679020000000000805540000000000000f03f00"
              "8080d0e2c6bfce972f")


def test_a_tuner_handoff_of_the_previous_generation_reads_with_no_capacity():
    data = bytes.fromhex(HANDOFF_V1)
    assert codec.encode("TunerHandoff", SAMPLES["TunerHandoff"])[2:10] != data[2:10], "the schema did not change"
    assert codec.decode("TunerHandoff", data) == {**SAMPLES["TunerHandoff"], "capacity": [], "host": None}
    with pytest.raises(CodecError, match="trailing bytes"):
        codec.decode("TunerHandoff", data + b"\x00")


# A TunerHandoff written before a capacity's ``variant`` and ``service_ms``
# (schemas/history/TunerHandoff.v2.avsc): the codec at commit e21a5ba encoding the sample without them.
HANDOFF_V2 = ("c30102967dfbdb0080af1c696d6167652d636c6173736966790e0000000000003240049a9999999999b93f000000000000f03f"
              "000400000000000054400000000000003e40000210636c617373696679020000000000805540000000000000f03f00"
              "8080d0e2c6bfce972f0210636c6173736966790000000000c0774000000000008055400400000000000079400000000000"
              "005e400000")


# A TunerHandoff written before a capacity's ``ladder`` (schemas/history/TunerHandoff.v3.avsc): the codec
# at commit 793ab18 encoding the sample without it.
HANDOFF_V3 = ("c30132de1b839bd4401c1c696d6167652d636c6173736966790e0000000000003240049a9999999999b93f000000000000f03f"
              "000400000000000054400000000000003e40000210636c617373696679020000000000805540000000000000f03f00"
              "8080d0e2c6bfce972f0210636c6173736966790000000000c0774000000000008055400400000000000079400000000000"
              "005e40000a6c6974653004333333333333274000000000000035400000")


# A TunerHandoff written before the host and the CPU per item (schemas/history/TunerHandoff.v4.avsc): the
# codec at commit 7bbac78 encoding the sample without them.
HANDOFF_V4 = ("c301b622f6086b1773ad1c696d6167652d636c6173736966790e0000000000003240049a9999999999b93f000000000000f03f"
              "000400000000000054400000000000003e40000210636c617373696679020000000000805540000000000000f03f00"
              "8080d0e2c6bfce972f0210636c6173736966790000000000c0774000000000008055400400000000000079400000000000"
              "005e40000a6c69746530043333333333332740000000000000354000020a6c69746530d578e9263108e83f000000000000"
              "f03f00000000008055400400000000000079400000000000005e40000433333333333327400000000000003540000000")
# A TunerHandoff written before the host's CPU per window (schemas/history/TunerHandoff.v5.avsc): the codec
# at commit 29e5f6b encoding the sample with the host it had then (6.5 ms a request, none per window).
HANDOFF_V5 = ("c301764b798967f090ac1c696d6167652d636c6173736966790e0000000000003240049a9999999999b93f000000000000f0"
              "3f000400000000000054400000000000003e40000210636c617373696679020000000000805540000000000000f03f008080"
              "d0e2c6bfce972f0210636c6173736966790000000000c0774000000000008055400400000000000079400000000000005e40"
              "000a6c69746530043333333333332740000000000000354000020a6c69746530d578e9263108e83f000000000000f03f0000"
              "0000008055400400000000000079400000000000005e40000433333333333327400000000000003540000000000000002540"
              "00000000000000254000029a9999999999f53f0000000000001a40")


def test_a_tuner_handoff_written_before_the_cpu_per_window_reads_with_none():
    data = bytes.fromhex(HANDOFF_V5)
    assert codec.encode("TunerHandoff", SAMPLES["TunerHandoff"])[2:10] != data[2:10], "the schema did not change"
    host = {"free_cores": 1.35, "request_cpu_ms": 6.5, "window_cpu_ms": 0.0}  # all of it per request, as then
    assert codec.decode("TunerHandoff", data) == {**SAMPLES["TunerHandoff"], "host": host}
    with pytest.raises(CodecError, match="trailing bytes"):
        codec.decode("TunerHandoff", data + b"\x00")


NO_CPU = {"cpu_ms_per_item": 0.0}
LADDER = SAMPLES["TunerHandoff"]["capacity"][0]["ladder"]


@pytest.mark.parametrize("data, defaults", [
    (HANDOFF_V4, {**NO_CPU, "ladder": [{**r, **NO_CPU} for r in LADDER]}),  # no host bound (control_io)
    (HANDOFF_V2, {"variant": "", "service_ms": [], "ladder": [], **NO_CPU}),  # the tuner takes the pace as 1 (slipstream.tuner.pace)
    (HANDOFF_V3, {"ladder": [], **NO_CPU}),  # the tuner moves no share (slipstream.tuner.policy: replicas only)
])
def test_a_tuner_handoff_of_an_earlier_generation_reads_with_its_new_fields_defaulted(data, defaults):
    data = bytes.fromhex(data)
    assert codec.encode("TunerHandoff", SAMPLES["TunerHandoff"])[2:10] != data[2:10], "the schema did not change"
    cap = {**SAMPLES["TunerHandoff"]["capacity"][0], **defaults}
    assert codec.decode("TunerHandoff", data) == {**SAMPLES["TunerHandoff"], "capacity": [cap], "host": None}
    with pytest.raises(CodecError, match="trailing bytes"):
        codec.decode("TunerHandoff", data + b"\x00")


# ----------------------------------------------------------------------------------------------
# The Confluent framing without a registry (with one: tests/integration/test_schema_registry.py).


def test_without_a_registry_records_are_single_object_and_confluent_ones_name_what_is_missing():
    codec.use_registry(None)
    data = codec.encode("InferenceRequest", REQ, "slipstream.p.s.in")
    assert data[:2] == b"\xc3\x01"
    with pytest.raises(CodecError, match=r"single-object header C3 01, got 00: a record in the Confluent "
                                         r"wire format \(schema id 7\) needs a schema registry "
                                         r"\(SLIPSTREAM_SCHEMA_REGISTRY_URL\)"):
        codec.decode("InferenceRequest", b"\x00\x00\x00\x00\x07" + data[10:])


def test_an_unreachable_registry_is_an_encode_error_naming_it():
    try:
        codec.use_registry("http://127.0.0.1:9/apis/ccompat/v7")  # discard port: nothing listens
        with pytest.raises(CodecError, match=r"cannot encode InferenceRequest for t: schema registry POST "
                                             r"http://127.0.0.1:9/apis/ccompat/v7/subjects/t-value/versions"):
            codec.encode("InferenceRequest", REQ, "t")
        assert codec.encode("InferenceRequest", REQ)[:2] == b"\xc3\x01"  # no topic: single-object
    finally:
        codec.use_registry(None)
    with pytest.raises(ValueError, match="must be http"):
        codec.use_registry("127.0.0.1:8081")
