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

``SLIPSTREAM_KAFKA_VERSION`` picks the Kafka release of the local brokers (:func:`kafka_version_from_env`;
the supported ones and the default: ``slipstream.streams.broker.versions``).

This module is the one place that reads Slipstream's settings from the process environment (a unit
test, ``tests/unit/test_config.py``, fails on a read anywhere else); every variable's name is a
``*_ENV`` constant here, also for the modules that set one for a child process. The process-level
settings besides Kafka's: :func:`bootstrap_from_env`, :func:`cache_from_env`,
:func:`stage_from_env`, :func:`metrics_addr_from_env`, :func:`calibration_from_env`,
:func:`take_lifeline_fd`. Options of the CLI read theirs through click (``envvar=`` one of these
constants).
"""
from __future__ import annotations

import os
import re
import ssl
from dataclasses import dataclass, field
from typing import Any, Mapping

# The environment variables, each spelled once (the CLI's options name theirs with envvar=).
BOOTSTRAP_ENV = "SLIPSTREAM_BOOTSTRAP"
SECURITY_PROTOCOL_ENV = "SLIPSTREAM_SECURITY_PROTOCOL"
SASL_MECHANISM_ENV = "SLIPSTREAM_SASL_MECHANISM"
SASL_USERNAME_ENV = "SLIPSTREAM_SASL_USERNAME"
SASL_PASSWORD_ENV = "SLIPSTREAM_SASL_PASSWORD"
SSL_CAFILE_ENV = "SLIPSTREAM_SSL_CAFILE"
REPLICATION_FACTOR_ENV = "SLIPSTREAM_REPLICATION_FACTOR"
MIN_INSYNC_REPLICAS_ENV = "SLIPSTREAM_MIN_INSYNC_REPLICAS"
PROCESSING_ENV = "SLIPSTREAM_PROCESSING"
SESSION_TIMEOUT_ENV = "SLIPSTREAM_SESSION_TIMEOUT_S"
SCHEMA_REGISTRY_ENV = "SLIPSTREAM_SCHEMA_REGISTRY_URL"
TOPIC_PREFIX_ENV, GROUP_PREFIX_ENV = "SLIPSTREAM_TOPIC_PREFIX", "SLIPSTREAM_GROUP_PREFIX"
KAFKA_VERSION_ENV = "SLIPSTREAM_KAFKA_VERSION"
KAFKA_STATE_ENV, KAFKA_HOST_ENV = "SLIPSTREAM_STATE_KAFKA", "SLIPSTREAM_KAFKA_HOST"
PIPELINE_ENV, STAGE_ENV = "SLIPSTREAM_PIPELINE", "SLIPSTREAM_STAGE"
CACHE_ENV = "SLIPSTREAM_CACHE"
METRICS_ADDR_ENV = "SLIPSTREAM_METRICS_ADDR"
METRICS_PORT_ENV = "SLIPSTREAM_METRICS_PORT"  # not a setting: a worker refuses to start when it is set
CALIBRATION_ENV = "SLIPSTREAM_CALIBRATION"
LIFELINE_ENV = "SLIPSTREAM_LIFELINE_FD"
STATE_DIR_ENV = "SLIPSTREAM_STATE_DIR"
MAX_REPLICAS_ENV, PROFILES_ENV = "SLIPSTREAM_MAX_REPLICAS", "SLIPSTREAM_PROFILES"
COMMIT_INTERVAL_ENV, JOIN_MEMORY_ENV = "SLIPSTREAM_COMMIT_INTERVAL_S", "SLIPSTREAM_JOIN_MEMORY"
GATEWAY_ADDR_ENV, GATEWAY_GRPC_PORT_ENV = "SLIPSTREAM_GATEWAY_ADDR", "SLIPSTREAM_GATEWAY_GRPC_PORT"
GATEWAY_URL_ENV = "SLIPSTREAM_GATEWAY_URL"
RESEARCH_DATA_ENV = "SLIPSTREAM_RESEARCH_DATA"
MEMBER_FILE_ENV = "SLIPSTREAM_MEMBER_FILE"  # where a worker writes its group members (set by its supervisor)

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
        e = _env(env)
        return cls(
            bootstrap=e.get(BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP),
            security_protocol=e.get(SECURITY_PROTOCOL_ENV, "PLAINTEXT"),
            sasl_mechanism=e.get(SASL_MECHANISM_ENV),
            sasl_username=e.get(SASL_USERNAME_ENV),
            sasl_password=e.get(SASL_PASSWORD_ENV),
            ssl_cafile=e.get(SSL_CAFILE_ENV),
            replication_factor=_int(e, REPLICATION_FACTOR_ENV),
            min_insync_replicas=_int(e, MIN_INSYNC_REPLICAS_ENV),
            processing=e.get(PROCESSING_ENV) or DEFAULT_PROCESSING,
            session_timeout_s=_float(e, SESSION_TIMEOUT_ENV) or DEFAULT_SESSION_TIMEOUT_S,
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
    return _env(env).get(SCHEMA_REGISTRY_ENV) or None


def prefixes_from_env(env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(topic prefix, consumer-group prefix) from ``SLIPSTREAM_TOPIC_PREFIX`` / ``SLIPSTREAM_GROUP_PREFIX``."""
    e = _env(env)
    out = (e.get(TOPIC_PREFIX_ENV) or DEFAULT_PREFIX, e.get(GROUP_PREFIX_ENV) or DEFAULT_PREFIX)
    for name, value in zip((TOPIC_PREFIX_ENV, GROUP_PREFIX_ENV), out):
        if not _LEGAL_PREFIX.fullmatch(value):
            raise ValueError(f"{name} may hold only letters, digits, '.', '_' and '-', got {value!r}")
    return out


def kafka_version_from_env(env: Mapping[str, str] | None = None) -> str | None:
    """``SLIPSTREAM_KAFKA_VERSION``: the Kafka release the local brokers run (``slipstream kafka up``, the
    tests' own brokers, chaos); unset or empty: the default (``slipstream.streams.broker.versions``)."""
    return _env(env).get(KAFKA_VERSION_ENV) or None


def bootstrap_from_env(env: Mapping[str, str] | None = None) -> str | None:
    """``SLIPSTREAM_BOOTSTRAP`` as given: a Kafka the caller must use rather than start its own; unset or
    empty: None (:meth:`KafkaSettings.from_env` then falls back to :data:`DEFAULT_BOOTSTRAP`)."""
    return _env(env).get(BOOTSTRAP_ENV) or None


def export_bootstrap(bootstrap: str | None) -> str | None:
    """Set ``SLIPSTREAM_BOOTSTRAP`` for this process and the ones it starts (None: unset it); returns
    the value it replaced, for the caller to put back when its run ends."""
    previous = os.environ.get(BOOTSTRAP_ENV)
    if bootstrap is None:
        os.environ.pop(BOOTSTRAP_ENV, None)
    else:
        os.environ[BOOTSTRAP_ENV] = bootstrap
    return previous


def cache_from_env(env: Mapping[str, str] | None = None) -> str | None:
    """``SLIPSTREAM_CACHE``: the model cache directory (``slipstream.agents.zoo``); unset or empty: None,
    the zoo's default."""
    return _env(env).get(CACHE_ENV) or None


def stage_from_env(env: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """(``SLIPSTREAM_PIPELINE``, ``SLIPSTREAM_STAGE``): the spec file and stage of a worker started by
    ``faust -A slipstream.agents.app worker``; no defaults (None when unset)."""
    e = _env(env)
    return e.get(PIPELINE_ENV), e.get(STAGE_ENV)


def metrics_addr_from_env(default: str, env: Mapping[str, str] | None = None) -> str:
    """``SLIPSTREAM_METRICS_ADDR`` (``HOST:PORT`` of /metrics, /healthz, /readyz), else ``default``."""
    return _env(env).get(METRICS_ADDR_ENV, default)


def metrics_port_set(env: Mapping[str, str] | None = None) -> bool:
    """Whether ``SLIPSTREAM_METRICS_PORT`` is set: not a setting, a worker refuses it and names
    ``SLIPSTREAM_METRICS_ADDR`` instead."""
    return bool(_env(env).get(METRICS_PORT_ENV))


def calibration_from_env(env: Mapping[str, str] | None = None) -> str:
    """``SLIPSTREAM_CALIBRATION``: ``off``, ``latest`` or a version (``slipstream.streams.calibration``);
    default ``latest``."""
    return _env(env).get(CALIBRATION_ENV, "latest")


def take_lifeline_fd() -> str | None:
    """``SLIPSTREAM_LIFELINE_FD`` (``slipstream.streams.procs.lifeline``), removed from this process's
    environment so its own children do not inherit it; None when unset."""
    return os.environ.pop(LIFELINE_ENV, None)


def _env(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if env is None else env
