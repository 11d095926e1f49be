"""A client of a Confluent-compatible schema registry (Confluent's own, Apicurio's ``/apis/ccompat/v7``,
Karapace): the two calls the Confluent wire format needs, over plain HTTP (``urllib``), both cached.

- :meth:`SchemaRegistry.register`: the id of a schema under a subject (``<topic>-value``), registering it
  if the registry does not have it (``POST /subjects/<subject>/versions``; idempotent there);
- :meth:`SchemaRegistry.schema`: the writer schema of an id (``GET /schemas/ids/<id>``), parsed.

The first call per (subject, schema) and per id blocks on one HTTP round trip (at most ``timeout_s``);
every later one is a dict lookup. Failures raise :class:`RegistryError` naming the URL and the
registry's answer; a failed id look-up is remembered for ``negative_ttl_s`` (the same error again,
without a call), so records naming an id the registry does not have cost one call, not one each. Safe
from several threads (``slipstream.streams.codec.prefetch`` runs look-ups in threads, off the event loop); one call
per id at a time.
"""
from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable

import fastavro

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryError(RuntimeError):
    """The schema registry could not be reached, or refused the request."""


@dataclass
class SchemaRegistry:
    url: str  # base URL, e.g. http://127.0.0.1:18081/apis/ccompat/v7
    timeout_s: float = 5.0
    negative_ttl_s: float = 30.0
    clock: Callable[[], float] = time.monotonic
    _ids: dict[tuple[str, str], int] = field(default_factory=dict)
    _schemas: dict[int, Any] = field(default_factory=dict)
    _failed: dict[int, tuple[float, RegistryError]] = field(default_factory=dict)  # id -> (until, error)
    _locks: dict[int, threading.Lock] = field(default_factory=dict)
    _guard: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if urllib.parse.urlsplit(self.url).scheme not in ("http", "https"):
            raise ValueError(f"schema registry URL must be http(s)://host:port[/path], got {self.url!r}")
        if not 0 < self.timeout_s <= 30 or self.negative_ttl_s < 0:
            raise ValueError(f"schema registry timeout_s must be in (0, 30] and negative_ttl_s >= 0, got "
                             f"{self.timeout_s}, {self.negative_ttl_s}")
        self.url = self.url.rstrip("/")

    def register(self, subject: str, schema_json: str) -> int:
        """The registry's id of ``schema_json`` (Avro, as JSON text) under ``subject``."""
        key = (subject, schema_json)
        if key not in self._ids:
            path = f"/subjects/{urllib.parse.quote(subject, safe='')}/versions"
            self._ids[key] = int(self._call("POST", path, {"schema": schema_json})["id"])
        return self._ids[key]

    def schema(self, schema_id: int) -> Any:
        """The parsed (fastavro) writer schema registered under ``schema_id``; RegistryError (cached for
        ``negative_ttl_s``) when it cannot be had."""
        if schema_id in self._schemas:
            return self._schemas[schema_id]
        with self._guard:
            lock = self._locks.setdefault(schema_id, threading.Lock())
        with lock:  # one call per id: concurrent askers wait for its answer
            if schema_id in self._schemas:
                return self._schemas[schema_id]
            failed = self._failed.get(schema_id)
            if failed is not None and self.clock() < failed[0]:
                raise failed[1]
            try:
                text = self._call("GET", f"/schemas/ids/{schema_id}")["schema"]
                parsed = fastavro.parse_schema(json.loads(text))
            except RegistryError as exc:
                self._failed[schema_id] = (self.clock() + self.negative_ttl_s, exc)
                raise
            except Exception as exc:  # an answer that is not an Avro schema (JSON, parse errors)
                err = RegistryError(f"schema registry GET {self.url}/schemas/ids/{schema_id}: not an Avro "
                                    f"schema: {type(exc).__name__}: {exc}")
                self._failed[schema_id] = (self.clock() + self.negative_ttl_s, err)
                raise err from None
            self._failed.pop(schema_id, None)
            self._schemas[schema_id] = parsed
            return parsed

    def registered(self, subject: str, schema_json: str) -> bool:
        """Whether :meth:`register` answers without a call."""
        return (subject, schema_json) in self._ids

    def cached(self, schema_id: int) -> bool:
        """Whether :meth:`schema` answers ``schema_id`` without a call (its schema, or a recent failure)."""
        failed = self._failed.get(schema_id)
        return schema_id in self._schemas or (failed is not None and self.clock() < failed[0])

    def subjects(self) -> list[str]:
        return self._call("GET", "/subjects")

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise RegistryError(f"schema registry {method} {self.url}{path}: HTTP {exc.code}: "
                                f"{exc.read()[:500].decode(errors='replace')}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise RegistryError(f"schema registry {method} {self.url}{path}: {exc}") from None
