"""Our codec against Apache's ``avro`` package, the reference Python implementation of the Avro spec:
every record type crosses in both directions through a single-object reader/writer built here with
``avro`` alone from the ``.avsc`` files (as a Java or Rust client would build one)."""
from __future__ import annotations

import io

import avro.io
import avro.schema
import pytest

from slipstream import schemas
from slipstream.streams import codec
from tests.wire_samples import SAMPLES

RECORDS = sorted(SAMPLES)


def avro_schema(record: str) -> avro.schema.Schema:
    """``record`` parsed by avro from its .avsc file, HopTiming's file parsed first for its name."""
    names = avro.schema.Names()
    if record != "HopTiming":
        avro.schema.make_avsc_object(schemas.raw("HopTiming"), names)
    return avro.schema.make_avsc_object(schemas.raw(record), names)


def avro_read(schema: avro.schema.Schema, data: bytes) -> dict:
    """A single-object reader: header C3 01, avro's own CRC-64 of its canonical form, then the body."""
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == schema.fingerprint("CRC-64-AVRO"), "fingerprint is not the spec's"
    body = io.BytesIO(data[10:])
    value = avro.io.DatumReader(schema).read(avro.io.BinaryDecoder(body))
    assert body.read() == b"", "trailing bytes"
    return value


def avro_write(schema: avro.schema.Schema, value: dict) -> bytes:
    buf = io.BytesIO()
    buf.write(b"\xc3\x01" + schema.fingerprint("CRC-64-AVRO"))
    avro.io.DatumWriter(schema).write(value, avro.io.BinaryEncoder(buf))
    return buf.getvalue()


@pytest.mark.parametrize("record", RECORDS)
def test_avro_reads_what_our_codec_writes(record):
    assert avro_read(avro_schema(record), codec.encode(record, SAMPLES[record])) == SAMPLES[record]


@pytest.mark.parametrize("record", RECORDS)
def test_our_codec_reads_what_avro_writes(record):
    data = avro_write(avro_schema(record), SAMPLES[record])
    assert codec.codec(record).known_writers.get(data[2:10]) is not None, "fingerprint unknown to us"
    assert codec.decode(record, data) == SAMPLES[record]


@pytest.mark.parametrize("record", RECORDS)
def test_canonical_form_is_the_specs(record):
    """fastavro's canonical form of our expanded schema is avro's, byte for byte."""
    from fastavro.schema import to_parsing_canonical_form

    assert to_parsing_canonical_form(schemas.load(record)) == avro_schema(record).canonical_form


def test_the_fingerprints_documented_for_other_languages_are_the_ones_written():
    import re
    from pathlib import Path

    doc = (Path(__file__).parents[3] / "docs" / "dataplane.md").read_text()
    table = dict(re.findall(r"^\| `(\w+)` \| `([0-9a-f]{16})` \|$", doc, re.M))
    assert table and {r: codec.encode(r, SAMPLES[r])[2:10].hex() for r in table} == table
