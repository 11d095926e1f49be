"""Transient or permanent (``slipstream.streams.kafka.is_transient``): Kafka's own ``retriable`` flag decides, a
client-side timeout is transient, a record over its topic's limit and an encode error are not."""
import pytest
from aiokafka import errors

from slipstream.streams.codec import CodecError
from slipstream.streams.kafka import is_transient
from slipstream.streams.limits import RecordTooLarge


@pytest.mark.parametrize("exc", [errors.UnknownTopicOrPartitionError(), errors.NotEnoughReplicasError(),
                                 errors.NotLeaderForPartitionError(), errors.LeaderNotAvailableError(),
                                 errors.RequestTimedOutError(), errors.KafkaConnectionError(),
                                 errors.KafkaTimeoutError()])
def test_retriable_errors_are_transient(exc):
    assert is_transient(exc)


@pytest.mark.parametrize("exc", [RecordTooLarge("t", 2_000_000, 1_048_588), errors.MessageSizeTooLargeError(),
                                 errors.RecordTooLargeError(), errors.TopicAuthorizationFailedError(),
                                 errors.OutOfOrderSequenceNumber(), errors.InvalidTopicError(),
                                 CodecError("bad value"), ValueError("x")])
def test_the_rest_is_permanent(exc):
    assert not is_transient(exc)
