"""Record limits (``slipstream.streams.limits``): read from DescribeConfigs, checked per topic, dead letters cut
to fit with the whole input's size and sha256 named."""
import hashlib
from types import SimpleNamespace

import pytest

from slipstream.streams.limits import BATCH_OVERHEAD, BROKER_DEFAULT, BURST_BATCH_BYTES, Limits, RecordTooLarge, parse_describe_configs


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
    assert limits.batch_bytes() == 2000  # no batch the narrowest topic would refuse


def test_a_bursting_producers_batch_holds_many_records_but_fits_every_topic():
    assert Limits().batch_bytes() == BURST_BATCH_BYTES <= BROKER_DEFAULT
    assert BURST_BATCH_BYTES >= 64 * 16 * 1024  # 64 records of 16 KiB, not aiokafka's one
    assert Limits({"in": 8 << 20}).batch_bytes() == BURST_BATCH_BYTES
    assert Limits({"in": 8 << 20, "dead": 300_000}).batch_bytes() == 300_000


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


def test_a_topics_own_configs_are_those_set_on_it_whatever_the_response_version():
    from slipstream.streams.admin import topic_own_configs

    v1 = SimpleNamespace(resources=[(0, "", 2, "t", [
        ("cleanup.policy", "compact", False, 1, False, []),  # source 1: set on the topic
        ("max.message.bytes", "1048588", False, 5, False, []),  # 5: the broker's default
        ("segment.ms", None, False, 1, False, []),
    ]), (3, "unknown topic", 2, "gone", [("cleanup.policy", "compact", False, 1, False, [])])])
    v0 = SimpleNamespace(resources=[(0, "", 2, "u", [
        ("retention.ms", "1000", False, False, False),  # not default: set on the topic
        ("max.message.bytes", "1048588", False, True, False),
        ("message.format.version", "3.0", True, False, False),  # read only: never the topic's
    ])])
    assert topic_own_configs([v1, v0]) == {"t": {"cleanup.policy": "compact"}, "u": {"retention.ms": "1000"}}


def test_the_specs_record_limit_goes_on_every_topic_and_none_leaves_the_brokers():
    from slipstream.streams import topics
    from slipstream.streams.spec import parse_pipeline

    doc = {"name": "p", "slo_ms": 100, "hardware": {"c": {"kind": "cpu", "cost_per_hour": 1}},
           "stages": [{"name": "s", "variants": [{"name": "v", "model": "noop", "accuracy": 1}]}]}
    sized = topics.all_topics(parse_pipeline({**doc, "max_message_bytes": 300_000}))
    assert {t.config["max.message.bytes"] for t in sized} == {"300000"}
    assert next(t for t in sized if t.name.endswith(".control")).config["cleanup.policy"] == "compact"
    assert all("max.message.bytes" not in t.config for t in topics.all_topics(parse_pipeline(doc)))
