"""A client of a Confluent-compatible schema registry (Confluent's own, Apicurio's ``/apis/ccompat/v7``,
Karapace): the two calls the Confluent wire format needs, over plain HTTP (``urllib``), both cached.

- :meth:`SchemaRegistry.register`: the id of a schema under a subject (``<topic>-value``), registering it
  if the registry does not have it (``POST /subjects/<subject>/versions``; idempotent there);
- :meth:`SchemaRegistry.schema`: the writer schema of an id (``GET /schemas/ids/<id>``), parsed.

The first call per (subject, schema) and per id blocks on one HTTP round trip; every later one is a dict
lookup. Failures raise :class:`RegistryError` naming the URL and the registry's answer.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import fastavro

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryError(RuntimeError):
    """The schema registry could not be reached, or refused the request."""


@dataclass
class SchemaRegistry:
    url: str  # base URL, e.g. http://127.0.0.1:18081/apis/ccompat/v7
    timeout_s: float = 5.0
    _ids: dict[tuple[str, str], int] = field(default_factory=dict)
    _schemas: dict[int, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if urllib.parse.urlsplit(self.url).scheme not in ("http", "https"):
            raise ValueError(f"schema registry URL must be http(s)://host:port[/path], got {self.url!r}")
        self.url = self.url.rstrip("/")

    def register(self, subject: str, schema_json: str) -> int:
        """The registry's id of ``schema_json`` (Avro, as JSON text) under ``subject``."""
        key = (subject, schema_json)
        if key not in self._ids:
            path = f"/subjects/{urllib.parse.quote(subject, safe='')}/versions"
            self._ids[key] = int(self._call("POST", path, {"schema": schema_json})["id"])
        return self._ids[key]

    def schema(self, schema_id: int) -> Any:
        """The parsed (fastavro) writer schema registered under ``schema_id``."""
        if schema_id not in self._schemas:
            text = self._call("GET", f"/schemas/ids/{schema_id}")["schema"]
            self._schemas[schema_id] = fastavro.parse_schema(json.loads(text))
        return self._schemas[schema_id]

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
