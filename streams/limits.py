"""Record size limits: the one place that knows how large a record each topic takes.

A Kafka topic refuses a record batch over its ``max.message.bytes`` (the broker's
``message.max.bytes``, 1 MiB by default, unless the topic sets its own). A worker reads every topic it
writes and reads once at start (:func:`read_limits`, one DescribeConfigs request) and checks each
record against its topic's limit before it is sent (:meth:`Limits.check`), so an output the broker
would refuse never reaches the broker (a refused batch of an idempotent producer fails every later
batch of its partition); it becomes an ``error`` result naming the size and the limit instead
(``slipstream.agents.delivery``). A dead letter must always be writable: :meth:`Limits.fit_original` cuts an
input that does not fit the dead-letter topic to what does and names the whole input's size and
sha256 in the reason.

The size compared is the record's value, key and headers plus :data:`BATCH_OVERHEAD` (the record
batch header and one record's framing): what the broker counts for a batch of one record.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from aiokafka.errors import MessageSizeTooLargeError

from .config import KafkaSettings

MAX_REQUEST_BYTES = 8 * 1024 * 1024  # the producers' max_request_size: no topic of a spec takes more
BROKER_DEFAULT = 1_048_588  # Kafka's message.max.bytes default: what a topic without its own takes
BATCH_OVERHEAD = 61 + 21  # v2 record batch header, and one record's varint framing at most
MAX_ERROR_CHARS = 2000  # a reason is cut here (``slipstream.agents.routing``'s results and dead letters)
# aiokafka has one produce request in flight per broker, and a partition's next record waits while its
# last batch is full: with the default 16-KiB batch a burst of records of a few KiB or more goes out one
# record per broker round trip. A producer that sends bursts (a window's outputs, the load generator's
# due requests) takes batches of this much instead, at most its topics' limit (:meth:`Limits.batch_bytes`).
BURST_BATCH_BYTES = 1024 * 1024


class RecordTooLarge(MessageSizeTooLargeError):
    """A record over its topic's ``max.message.bytes``: refused before sending, for good."""

    def __init__(self, topic: str, size: int, limit: int) -> None:
        super().__init__(f"a record of {size} bytes is over the {limit}-byte limit of topic {topic} "
                         f"(max.message.bytes)")
        self.topic, self.size, self.limit = topic, size, limit


@dataclass(frozen=True)
class Limits:
    """Per-topic record limits in bytes; a topic not read takes the broker default."""

    by_topic: Mapping[str, int] = field(default_factory=dict)
    default: int = BROKER_DEFAULT

    def of(self, topic: str) -> int:
        return self.by_topic.get(topic, self.default)

    def largest(self) -> int:
        return max([self.default, *self.by_topic.values()])

    def batch_bytes(self) -> int:
        """A bursting producer's batch size: :data:`BURST_BATCH_BYTES`, but no batch any of these topics
        would refuse (a record larger than it still goes, in a batch of its own)."""
        return min([BURST_BATCH_BYTES, self.default, *self.by_topic.values()])

    @staticmethod
    def size(key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes]] = ()) -> int:
        """What the broker counts for a batch holding only this record (an upper bound)."""
        return (BATCH_OVERHEAD + len(key or b"") + len(value or b"")
                + sum(len(k.encode()) + len(v) + 10 for k, v in headers))

    def check(self, topic: str, key: bytes | None, value: bytes | None,
              headers: Sequence[tuple[str, bytes]] = ()) -> None:
        """Raise :class:`RecordTooLarge` when the record would not fit ``topic``."""
        n, limit = self.size(key, value, headers), self.of(topic)
        if n > limit:
            raise RecordTooLarge(topic, n, limit)

    def fit_original(self, topic: str, original: bytes, room_for_rest: int) -> tuple[bytes, str]:
        """(``original`` or its head, a note for the reason ("" when whole)) so that a dead letter of
        it fits ``topic`` beside ``room_for_rest`` bytes of its other fields."""
        room = self.of(topic) - BATCH_OVERHEAD - room_for_rest
        if len(original) <= room:
            return original, ""
        cut = max(room, 0)
        return original[:cut], (f" [original of {len(original)} bytes, sha256 "
                                f"{hashlib.sha256(original).hexdigest()}, cut to its first {cut} bytes "
                                f"to fit {topic}'s {self.of(topic)}-byte limit]")


def parse_describe_configs(responses: Iterable) -> dict[str, int]:
    """{topic: max.message.bytes} from aiokafka's DescribeConfigs responses (v0-v2 resources:
    (error code, message, type, name, [(config name, value, ...)])); topics with an error are left out."""
    out = {}
    for resp in responses:
        for code, _msg, _type, name, entries in resp.resources:
            for entry in entries if code == 0 else ():
                if entry[0] == "max.message.bytes" and entry[1] is not None:
                    out[name] = int(entry[1])
    return out


async def read_limits(settings: KafkaSettings, topic_names: Iterable[str]) -> Limits:
    """Each topic's ``max.message.bytes``, read from the cluster once (a topic that does not exist
    yet takes the broker default)."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    from .admin import admin_client

    names = sorted(set(topic_names))
    async with admin_client(settings) as admin:
        responses = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, t, configs={"max.message.bytes": None}) for t in names])
    return Limits(parse_describe_configs(responses))
