"""Kafka client settings, built once at the edge (the CLI) from the environment and passed down.

``SLIPSTREAM_BOOTSTRAP`` (default ``127.0.0.1:19092``, the local broker of ``slipstream kafka up``) picks
the cluster. For a secured cluster set ``SLIPSTREAM_SECURITY_PROTOCOL`` (SASL_SSL, SSL, SASL_PLAINTEXT),
``SLIPSTREAM_SASL_MECHANISM``, ``SLIPSTREAM_SASL_USERNAME``, ``SLIPSTREAM_SASL_PASSWORD`` and
``SLIPSTREAM_SSL_CAFILE``; they are passed through to aiokafka and faust unchanged.

Topics Slipstream creates get ``SLIPSTREAM_REPLICATION_FACTOR`` replicas (default: min(3, brokers the
cluster lists)) and ``min.insync.replicas`` ``SLIPSTREAM_MIN_INSYNC_REPLICAS`` (default: min(2, the
replication factor)); see ``slipstream.streams.admin.replication``. Topic and consumer-group names start with
``SLIPSTREAM_TOPIC_PREFIX`` and ``SLIPSTREAM_GROUP_PREFIX`` (both ``slipstream`` by default;
:func:`prefixes_from_env`, applied once per process by the CLI through ``slipstream.streams.topics.use_prefixes``).

``SLIPSTREAM_SESSION_TIMEOUT_S`` (default 2) is the workers' consumer-group session timeout: how long
after a worker dies its partitions move to the others.

``SLIPSTREAM_PROCESSING`` picks the delivery guarantee of the stage and join workers (:data:`PROCESSING`):
``exactly-once`` (each window's outputs and input offsets in one Kafka transaction; ``slipstream.agents.transactions``)
or ``at-least-once`` (outputs delivered, then offsets committed; a crash can repeat a window).
"""
from __future__ import annotations

import os
import re
import ssl
from dataclasses import dataclass, field
from typing import Any, Mapping

DEFAULT_BOOTSTRAP = "127.0.0.1:19092"
DEFAULT_PREFIX = "slipstream"
_LEGAL_PREFIX = re.compile(r"[A-Za-z0-9._-]{1,100}")  # Kafka's legal topic characters
EXACTLY_ONCE, AT_LEAST_ONCE = "exactly-once", "at-least-once"
PROCESSING = (EXACTLY_ONCE, AT_LEAST_ONCE)
DEFAULT_PROCESSING = AT_LEAST_ONCE
# A worker killed or frozen loses its partitions this long after its last heartbeat (Kafka's consumer
# session timeout; heartbeats every quarter of it). Clusters refuse one below their
# group.min.session.timeout.ms (6 s by default; the local broker's is 1 s): a worker raises its own
# to that (slipstream.streams.admin.fit_session_timeout).
DEFAULT_SESSION_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class KafkaSettings:
    bootstrap: str = DEFAULT_BOOTSTRAP
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    replication_factor: int | None = None  # of the topics Slipstream creates; None: min(3, brokers)
    min_insync_replicas: int | None = None  # of those topics; None: min(2, replication factor)
    processing: str = DEFAULT_PROCESSING  # the workers' delivery guarantee, one of PROCESSING
    session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S  # a silent worker's partitions move after it

    def __post_init__(self) -> None:
        if self.processing not in PROCESSING:
            raise ValueError(f"processing must be one of {', '.join(PROCESSING)}, got {self.processing!r}")
        if not self.bootstrap or any(":" not in h for h in self.bootstrap.split(",")):
            raise ValueError(f"bootstrap must be host:port[,host:port...], got {self.bootstrap!r}")
        if not 0 < self.session_timeout_s <= 3600:
            raise ValueError(f"session_timeout_s must be in (0, 3600], got {self.session_timeout_s!r}")
        for name in ("replication_factor", "min_insync_replicas"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ValueError(f"{name} must be >= 1, got {v}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "KafkaSettings":
        e = os.environ if env is None else env
        return cls(
            bootstrap=e.get("SLIPSTREAM_BOOTSTRAP", DEFAULT_BOOTSTRAP),
            security_protocol=e.get("SLIPSTREAM_SECURITY_PROTOCOL", "PLAINTEXT"),
            sasl_mechanism=e.get("SLIPSTREAM_SASL_MECHANISM"),
            sasl_username=e.get("SLIPSTREAM_SASL_USERNAME"),
            sasl_password=e.get("SLIPSTREAM_SASL_PASSWORD"),
            ssl_cafile=e.get("SLIPSTREAM_SSL_CAFILE"),
            replication_factor=_int(e, "SLIPSTREAM_REPLICATION_FACTOR"),
            min_insync_replicas=_int(e, "SLIPSTREAM_MIN_INSYNC_REPLICAS"),
            processing=e.get("SLIPSTREAM_PROCESSING") or DEFAULT_PROCESSING,
            session_timeout_s=_float(e, "SLIPSTREAM_SESSION_TIMEOUT_S") or DEFAULT_SESSION_TIMEOUT_S,
        )

    @property
    def exactly_once(self) -> bool:
        return self.processing == EXACTLY_ONCE

    def ssl_context(self) -> ssl.SSLContext | None:
        if "SSL" not in self.security_protocol:
            return None
        return ssl.create_default_context(cafile=self.ssl_cafile)

    def aiokafka_kwargs(self) -> dict[str, Any]:
        """Connection keyword arguments for any aiokafka client."""
        kw: dict[str, Any] = {"bootstrap_servers": self.bootstrap,
                              "security_protocol": self.security_protocol}
        if self.sasl_mechanism:
            kw.update(sasl_mechanism=self.sasl_mechanism, sasl_plain_username=self.sasl_username,
                      sasl_plain_password=self.sasl_password)
        ctx = self.ssl_context()
        if ctx is not None:
            kw["ssl_context"] = ctx
        return kw

    def faust_broker_url(self) -> str:
        return ";".join(f"kafka://{h}" for h in self.bootstrap.split(","))


def _int(env: Mapping[str, str], name: str) -> int | None:
    return _number(env, name, int, "an integer")


def _float(env: Mapping[str, str], name: str) -> float | None:
    return _number(env, name, float, "a number")


def _number(env: Mapping[str, str], name: str, kind: type, what: str):
    """``env[name]`` as ``kind``; None when unset or empty; a ValueError naming the variable else."""
    raw = env.get(name)
    if raw in (None, ""):
        return None
    try:
        return kind(raw)
    except ValueError:
        raise ValueError(f"{name} must be {what}, got {raw!r}") from None


def schema_registry_from_env(env: Mapping[str, str] | None = None) -> str | None:
    """``SLIPSTREAM_SCHEMA_REGISTRY_URL``: a Confluent-compatible registry, which switches writers to the
    Confluent wire format (``slipstream.streams.codec.use_registry``); unset or empty: single-object encoding."""
    return (os.environ if env is None else env).get("SLIPSTREAM_SCHEMA_REGISTRY_URL") or None


def prefixes_from_env(env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(topic prefix, consumer-group prefix) from ``SLIPSTREAM_TOPIC_PREFIX`` / ``SLIPSTREAM_GROUP_PREFIX``."""
    e = os.environ if env is None else env
    out = (e.get("SLIPSTREAM_TOPIC_PREFIX") or DEFAULT_PREFIX, e.get("SLIPSTREAM_GROUP_PREFIX") or DEFAULT_PREFIX)
    for name, value in zip(("SLIPSTREAM_TOPIC_PREFIX", "SLIPSTREAM_GROUP_PREFIX"), out):
        if not _LEGAL_PREFIX.fullmatch(value):
            raise ValueError(f"{name} may hold only letters, digits, '.', '_' and '-', got {value!r}")
    return out
