"""Record limits (``streams.limits``): read from DescribeConfigs, checked per topic, dead letters cut
to fit with the whole input's size and sha256 named."""
import hashlib
from types import SimpleNamespace

import pytest

from streams.limits import BATCH_OVERHEAD, BROKER_DEFAULT, Limits, RecordTooLarge, parse_describe_configs


def test_limits_come_from_each_topics_max_message_bytes_and_unknown_topics_take_the_broker_default():
    resp = SimpleNamespace(resources=[
        (0, "", 2, "narrow", [("max.message.bytes", "2000", False, 5, False, [])]),
        (0, "", 2, "wide", [("max.message.bytes", "16777216", False, 1, False, [])]),
        (3, "unknown topic", 2, "missing", []),
    ])
    limits = Limits(parse_describe_configs([resp]))
    assert limits.by_topic == {"narrow": 2000, "wide": 16777216}
    assert limits.of("missing") == BROKER_DEFAULT
    assert limits.largest() == 16777216


def test_a_record_over_its_topics_limit_is_refused_naming_its_size_the_limit_and_the_topic():
    limits = Limits({"narrow": 2000})
    limits.check("narrow", b"k", b"x" * (2000 - BATCH_OVERHEAD - 1))  # fits
    limits.check("other", b"k", b"x" * 100_000)  # the broker default
    with pytest.raises(RecordTooLarge, match=r"record of 2\d{3} bytes is over the 2000-byte limit of topic narrow"):
        limits.check("narrow", b"k", b"x" * 2000)
    assert not RecordTooLarge("t", 2, 1).retriable  # permanent: never sent again


def test_an_original_that_does_not_fit_the_dead_letter_topic_is_cut_and_its_digest_named():
    limits = Limits({"dlq": 10_000})
    original = bytes(range(256)) * 100  # 25,600 bytes
    kept, note = limits.fit_original("dlq", original, 500)
    assert original.startswith(kept) and len(kept) == 10_000 - BATCH_OVERHEAD - 500
    assert f"original of {len(original)} bytes" in note and hashlib.sha256(original).hexdigest() in note
    assert limits.fit_original("dlq", b"small", 500) == (b"small", "")
