"""Kafka admin, a thin aiokafka wrapper: create topics, read and grow partition counts.

Topics are created with a replication factor and ``min.insync.replicas`` from :func:`replication`:
the settings' values, or min(3, brokers the cluster lists) and min(2, replication factor). With
producers on acks=all (``slipstream.streams.kafka``) a write then survives the loss of any one broker of three.

Partitions only grow (Kafka cannot shrink a topic). Growing changes key->partition hashing, which is
fine for Slipstream's stateless stages.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from contextlib import asynccontextmanager
from typing import AsyncIterator, Iterable

from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from .config import KafkaSettings
from .topics import TopicSpec

log = logging.getLogger(__name__)


@asynccontextmanager
async def admin_client(settings: KafkaSettings) -> AsyncIterator[AIOKafkaAdminClient]:
    client = AIOKafkaAdminClient(**settings.aiokafka_kwargs(), request_timeout_ms=15000)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


def replication(brokers: int, factor: int | None = None, min_insync: int | None = None) -> tuple[int, int]:
    """(replication factor, min.insync.replicas) for new topics on a cluster listing ``brokers``:
    ``factor`` or min(3, brokers); ``min_insync`` or min(2, factor)."""
    if brokers < 1:
        raise ValueError(f"the cluster lists no broker ({brokers})")
    rf = min(3, brokers) if factor is None else factor
    if not 1 <= rf <= brokers:
        raise ValueError(f"replication factor {rf} needs as many live brokers; the cluster lists {brokers}")
    isr = min(2, rf) if min_insync is None else min_insync
    if not 1 <= isr <= rf:
        raise ValueError(f"min.insync.replicas {isr} must be between 1 and the replication factor {rf}")
    return rf, isr


def new_topic(spec: TopicSpec, rf: int, min_isr: int) -> NewTopic:
    """The spec's topic with ``rf`` replicas; its own config wins over the default min.insync.replicas."""
    return NewTopic(spec.name, spec.partitions, rf, topic_configs={"min.insync.replicas": str(min_isr),
                                                                   **dict(spec.config)})


async def brokers(admin: AIOKafkaAdminClient) -> int:
    """Brokers the cluster's metadata lists (the live ones)."""
    return len((await admin.describe_cluster())["brokers"])


async def ensure_topics(settings: KafkaSettings, specs: Iterable[TopicSpec]) -> list[str]:
    """Create the topics that do not exist yet (existing ones are left as they are), replicated as
    :func:`replication` says. Returns created names."""
    specs = list(specs)
    async with admin_client(settings) as admin:
        existing = set(await admin.list_topics())
        todo = [s for s in specs if s.name not in existing]
        if todo:
            rf, isr = replication(await brokers(admin), settings.replication_factor, settings.min_insync_replicas)
        new = [new_topic(s, rf, isr) for s in todo]
        if new:
            try:
                await admin.create_topics(new)
            except TopicAlreadyExistsError:
                pass  # created concurrently by another process: fine
        await _wait_for_metadata(admin, [s.name for s in specs])
    return [t.name for t in new]


SIZE_KEY = "max.message.bytes"


async def align_sizes(settings: KafkaSettings, specs: Iterable[TopicSpec]) -> list[str]:
    """Set each existing topic's ``max.message.bytes`` to its spec's where the spec names one and the
    topic differs, keeping the topic's other own settings (AlterConfigs replaces them all, so they are
    read first). Returns the names changed."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    wanted = {s.name: s.config[SIZE_KEY] for s in specs if SIZE_KEY in s.config}
    if not wanted:
        return []
    async with admin_client(settings) as admin:
        responses = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, t) for t in sorted(wanted)])
        own = topic_own_configs(responses)
        todo = {t: {**c, SIZE_KEY: wanted[t]} for t, c in own.items() if c.get(SIZE_KEY) != wanted[t]}
        if todo:
            await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, t, configs=c)
                                       for t, c in sorted(todo.items())])
    return sorted(todo)


def topic_own_configs(responses: Iterable) -> dict[str, dict[str, str]]:
    """{topic: the configs set on the topic itself} from DescribeConfigs responses: v1+ entries
    (name, value, read only, source, sensitive, synonyms) with source 1 (a topic's dynamic config), v0
    entries (name, value, read only, is default, sensitive) not default; topics with an error are left
    out."""
    out: dict[str, dict[str, str]] = {}
    for resp in responses:
        for code, _msg, _type, name, entries in resp.resources:
            if code != 0:
                continue
            out[name] = {e[0]: e[1] for e in entries
                         if e[1] is not None and (e[3] == 1 if len(e) > 5 else not e[3] and not e[2])}
    return out


async def fit_session_timeout(settings: KafkaSettings) -> KafkaSettings:
    """``settings`` with its consumer session timeout within what the cluster's brokers accept
    (``group.min.session.timeout.ms`` .. ``group.max.session.timeout.ms``, read from one broker): a
    group join with a timeout outside them is refused, so a worker raises (or lowers) its own and says
    so. Unchanged when the brokers' configs cannot be read."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    keys = ("group.min.session.timeout.ms", "group.max.session.timeout.ms")
    try:
        async with admin_client(settings) as admin:
            node = (await admin.describe_cluster())["brokers"][0]["node_id"]
            responses = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.BROKER, str(node), configs={k: None for k in keys})])
    except Exception as exc:  # noqa: BLE001 - no right to read them (ACLs): the setting as it is
        log.warning("the brokers' session timeout bounds not read (%r)", exc)
        return settings
    bounds = {e[0]: int(e[1]) / 1000 for resp in responses for *_, entries in resp.resources
              for e in entries if e[0] in keys and e[1] is not None}
    fitted = min(max(settings.session_timeout_s, bounds.get(keys[0], 0.0)), bounds.get(keys[1], math.inf))
    if fitted != settings.session_timeout_s:
        log.warning("session timeout %.1f s is outside the cluster's bounds: %.1f s",
                                            settings.session_timeout_s, fitted)
    return dataclasses.replace(settings, session_timeout_s=fitted)


async def partition_counts(settings: KafkaSettings, topics: Iterable[str]) -> dict[str, int]:
    topics = list(topics)
    async with admin_client(settings) as admin:
        meta = await admin.describe_topics(topics)
    out = {}
    for t in meta:
        if t.get("error_code", 0):
            raise LookupError(f"topic {t.get('topic')!r}: error code {t['error_code']}")
        out[t["topic"]] = len(t["partitions"])
    return out


async def grow_partitions(settings: KafkaSettings, topic: str, count: int) -> int:
    """Raise ``topic`` to ``count`` partitions; a no-op if it already has that many or more.
    Returns the partition count after the call."""
    current = (await partition_counts(settings, [topic]))[topic]
    if count <= current:
        return current
    async with admin_client(settings) as admin:
        await admin.create_partitions({topic: NewPartitions(total_count=count)})
        for _ in range(100):
            meta = await admin.describe_topics([topic])
            if len(meta[0]["partitions"]) >= count:
                break
            await asyncio.sleep(0.1)  # metadata propagation has no notification in the admin API
    return count


async def delete_topics(settings: KafkaSettings, topics: Iterable[str]) -> None:
    async with admin_client(settings) as admin:
        await admin.delete_topics(list(topics))


async def _wait_for_metadata(admin: AIOKafkaAdminClient, topics: list[str]) -> None:
    for _ in range(100):
        meta = await admin.describe_topics(topics)
        if all(not t.get("error_code") and t["partitions"] for t in meta):
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"topics not visible in metadata: {topics}")
