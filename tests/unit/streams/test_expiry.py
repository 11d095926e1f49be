"""The expiry header (``slipstream.streams.expiry``): written for whole requests, read back exactly, ignored when
it cannot be two times in order."""
import struct

from slipstream.streams import expiry, kafka as kclient

REQ = {"request_id": "r1", "created_ns": 1_000, "deadline_ns": 401_000, "fragment": "1", "path": []}


def test_a_whole_request_carries_its_creation_and_deadline_and_reads_back():
    headers = kclient.headers_for("InferenceRequest", REQ)
    assert headers[0] == (kclient.SCHEMA_HEADER, b"InferenceRequest")
    assert expiry.read(headers) == expiry.Expiry(1_000, 401_000)


def test_fragments_and_other_records_carry_none():
    assert expiry.header(dict(REQ, fragment="1/2")) is None  # its drop needs the body's fragment
    assert expiry.header(dict(REQ, path=["a:0/2"])) is None
    assert kclient.headers_for("InferenceResult", REQ) == [(kclient.SCHEMA_HEADER, b"InferenceResult")]
    assert expiry.read(kclient.headers_for("InferenceRequest", dict(REQ, fragment="1/2"))) is None


def test_a_header_that_is_not_two_times_in_order_is_ignored():
    assert expiry.read(None) is None and expiry.read([]) is None
    assert expiry.read([(expiry.HEADER, b"short")]) is None
    assert expiry.read([(expiry.HEADER, None)]) is None
    assert expiry.read([(expiry.HEADER, struct.pack(">qq", 5, 4))]) is None  # deadline before creation
    assert expiry.read([(expiry.HEADER, struct.pack(">qq", -1, 4))]) is None
    assert expiry.read([(expiry.HEADER, struct.pack(">qq", 4, 5))]) == (4, 5)
