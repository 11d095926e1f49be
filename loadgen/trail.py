"""Where requests went: for a request without a result, every record keyed by its id on the pipeline's
topics (each stage's input, the join's, the results), and how far the topic's consumer group has
committed on that partition.

A record below its group's committed offset was taken as done by a worker: if no record follows it
downstream, the worker lost it. A record at or past the committed offset still waits (or was read
again after a rebalance); a request with no record at all never reached Kafka (its send failed).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from aiokafka import TopicPartition

from ..streams import kafka as kclient, topics
from ..streams.admin import admin_client
from ..streams.config import KafkaSettings
from ..streams.lag import committed, stage_groups
from ..streams.spec import Pipeline


@dataclass(frozen=True)
class Sighting:
    topic: str
    partition: int
    offset: int
    committed: int | None  # the topic's consumer group's committed offset there (None: nothing, or no group)

    def __str__(self) -> str:
        if self.committed is None:
            return f"{self.topic}[{self.partition}]@{self.offset}"
        state = "committed past it" if self.committed > self.offset else "not yet committed"
        return f"{self.topic}[{self.partition}]@{self.offset} ({state}: group at {self.committed})"


async def trail(kafka: KafkaSettings, pipe: Pipeline, request_ids: Iterable[str], since_ms: int = 0
                ) -> dict[str, list[Sighting]]:
    """Each request's records (keyed by its id) on the pipeline's topics since ``since_ms``, in topic
    order (stage inputs and the join's as ``stage_groups`` lists them, then the results)."""
    wanted = {rid.encode(): rid for rid in request_ids}
    out: dict[str, list[Sighting]] = {rid: [] for rid in wanted.values()}
    groups = {topic: group for group, topic in stage_groups(pipe).items()}
    async with admin_client(kafka) as admin:
        for topic in [*groups, topics.results(pipe.name)]:
            at = await committed(admin, groups[topic]) if topic in groups else {}
            for r in await kclient.records_since(kafka, topic, since_ms):
                if (rid := wanted.get(r.key)) is not None:
                    out[rid].append(Sighting(topic, r.partition, r.offset, at.get(TopicPartition(topic, r.partition))))
    return out


def describe(trails: dict[str, list[Sighting]]) -> str:
    """One line a request: its sightings, or that it never reached Kafka."""
    return "\n".join(f"{rid}: {'; '.join(map(str, seen)) or 'on no topic (its send failed)'}"
                     for rid, seen in trails.items())
