"""Kafka client settings, built once at the edge (the CLI) from the environment and passed down.

``SLIPSTREAM_BOOTSTRAP`` (default ``127.0.0.1:19092``, the local broker of ``slipstream kafka up``) picks
the cluster. For a secured cluster set ``SLIPSTREAM_SECURITY_PROTOCOL`` (SASL_SSL, SSL, SASL_PLAINTEXT),
``SLIPSTREAM_SASL_MECHANISM``, ``SLIPSTREAM_SASL_USERNAME``, ``SLIPSTREAM_SASL_PASSWORD`` and
``SLIPSTREAM_SSL_CAFILE``; they are passed through to aiokafka and faust unchanged.
"""
from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field
from typing import Any, Mapping

DEFAULT_BOOTSTRAP = "127.0.0.1:19092"


@dataclass(frozen=True)
class KafkaSettings:
    bootstrap: str = DEFAULT_BOOTSTRAP
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None

    def __post_init__(self) -> None:
        if not self.bootstrap or any(":" not in h for h in self.bootstrap.split(",")):
            raise ValueError(f"bootstrap must be host:port[,host:port...], got {self.bootstrap!r}")

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
        )

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
