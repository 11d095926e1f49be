"""Which Apache Kafka releases the local brokers run: the one place that names the default, the
supported releases and what differs between them (logging backend, extra broker settings).

``slipstream kafka up`` (and every test, chaos run or demo that starts a local broker) runs
:data:`DEFAULT_VERSION` unless ``--kafka-version`` or ``SLIPSTREAM_KAFKA_VERSION`` names another
supported release. :data:`OLDEST_VERSION` is the oldest release Slipstream supports; CI runs the
integration suite against both (``.ci/run``). Each release is built (Maven Central jars) in a folder
of its own, ``STATE_DIR/build/kafka-<version>``, so both stay cached side by side.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KafkaRelease:
    """One supported Kafka release and how to run it."""

    version: str
    maven_profile: str  # deploy/kafka/pom.xml profile that adds the logging backend
    log_config: str  # file in deploy/kafka
    log_config_property: str  # the JVM system property that points the backend at it
    # lines appended to deploy/kafka/server.properties (same @...@ placeholders)
    extra_properties: tuple[str, ...] = ()

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    @property
    def key(self) -> tuple[int, ...]:
        return tuple(int(p) for p in self.version.split("."))


_LOG4J1 = dict(maven_profile="log4j1", log_config="log4j.properties", log_config_property="log4j.configuration")
_LOG4J2 = dict(maven_profile="log4j2", log_config="log4j2.properties", log_config_property="log4j2.configurationFile")
# 4.x has share groups (KIP-932); their state topic would otherwise want replication 3
_KAFKA4 = ("share.coordinator.state.topic.replication.factor=@RF@", "share.coordinator.state.topic.min.isr=@MIN_ISR@")

RELEASES: dict[str, KafkaRelease] = {r.version: r for r in (
    KafkaRelease("4.4.0", **_LOG4J2, extra_properties=_KAFKA4),
    KafkaRelease("3.9.1", **_LOG4J1),
)}
DEFAULT_VERSION = "4.4.0"  # the newest release on Maven Central (2026-11)
OLDEST_VERSION = "3.9.1"  # the last 3.x release: still serves every old protocol version (KIP-896 is 4.0)
SUPPORTED = tuple(sorted(RELEASES, key=lambda v: RELEASES[v].key, reverse=True))

# metadata.version feature levels (KRaft) and their names, from Kafka 4.4.0's
# org.apache.kafka.server.common.MetadataVersion (featureLevel(), version()): the broker reports the
# levels it supports and the finalized one in its ApiVersions answer (slipstream.streams.broker.probe.broker_features)
METADATA_VERSIONS = {7: "3.3-IV3", 8: "3.4-IV0", 9: "3.5-IV0", 10: "3.5-IV1", 11: "3.5-IV2", 12: "3.6-IV0",
                     13: "3.6-IV1", 14: "3.6-IV2", 15: "3.7-IV0", 16: "3.7-IV1", 17: "3.7-IV2", 18: "3.7-IV3",
                     19: "3.7-IV4", 20: "3.8-IV0", 21: "3.9-IV0", 22: "4.0-IV0", 23: "4.0-IV1", 24: "4.0-IV2",
                     25: "4.0-IV3", 26: "4.1-IV0", 27: "4.1-IV1", 28: "4.2-IV0", 29: "4.2-IV1", 30: "4.3-IV0",
                     31: "4.4-IV0", 32: "4.4-IV1", 33: "4.4-IV2"}


def metadata_version_name(level: int) -> str:
    return METADATA_VERSIONS.get(level, f"level {level}")


def release(version: str | None = None) -> KafkaRelease:
    """The supported release ``version`` (None: the default); anything else is refused by name."""
    version = version or DEFAULT_VERSION
    try:
        return RELEASES[version]
    except KeyError:
        raise ValueError(f"Kafka {version} is not supported; supported: {', '.join(SUPPORTED)} "
                         f"(default {DEFAULT_VERSION})") from None
