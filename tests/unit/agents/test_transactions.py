"""The pure parts of exactly-once delivery: transactional ids and the processing switch."""
import pytest

from agents.transactions import transactional_id
from streams import topics
from streams.config import AT_LEAST_ONCE, DEFAULT_PROCESSING, EXACTLY_ONCE, KafkaSettings


def test_transactional_id_is_one_per_input_partition_and_the_same_for_every_owner():
    group = topics.consumer_group("p", "detect")
    a = transactional_id(group, topics.stage_input("p", "detect"), 0)
    assert a == transactional_id(group, topics.stage_input("p", "detect"), 0)  # a restart fences its zombie
    assert a != transactional_id(group, topics.stage_input("p", "detect"), 1)
    assert a != transactional_id(topics.consumer_group("p", "classify"), topics.stage_input("p", "detect"), 0)


def test_processing_switch_from_the_environment():
    assert KafkaSettings.from_env({}).processing == DEFAULT_PROCESSING
    assert KafkaSettings.from_env({"SLIPSTREAM_PROCESSING": "exactly-once"}).exactly_once
    assert not KafkaSettings.from_env({"SLIPSTREAM_PROCESSING": AT_LEAST_ONCE}).exactly_once
    assert KafkaSettings(processing=EXACTLY_ONCE).exactly_once
    with pytest.raises(ValueError, match="processing must be one of exactly-once, at-least-once"):
        KafkaSettings.from_env({"SLIPSTREAM_PROCESSING": "exactly_once"})
