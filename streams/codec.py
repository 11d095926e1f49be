"""The Avro codec: every record on every Slipstream topic, encoded with fastavro.

Wire format: Avro *single-object encoding* (Avro spec 1.8+): the two bytes ``C3 01``, the 8-byte
little-endian CRC-64-AVRO fingerprint of the writer schema's Parsing Canonical Form (nested named types
expanded at their first use), then the schemaless Avro body. Any Avro library (Java
``BinaryMessageEncoder``, Rust ``apache-avro``, Python ``avro``...) writes and reads it from the
``.avsc`` files in ``schemas/`` (``tests/unit/streams/test_wire_avro.py`` checks both directions with
Apache's ``avro``). Records written before the codec followed the specification carry the fingerprints
of ``schemas.LEGACY_FINGERPRINTS``; they are still read, never written.

**Confluent wire format** (optional): with a schema registry set (:func:`use_registry`; the CLI does,
from ``SLIPSTREAM_SCHEMA_REGISTRY_URL``), records sent to a topic (``slipstream.streams.kafka.send``) are written as
Kafka tooling expects them: ``00``, the 4-byte big-endian schema id of the writer schema registered under
the subject ``<topic>-value`` (``slipstream.streams.schema_registry``), then the same Avro body. Readers take both
framings whatever the switch says; a Confluent record needs the registry to read (its writer schema is
fetched by id, then cached, failures too for ``SchemaRegistry.negative_ttl_s``). Async readers call
:func:`prefetch` on what they fetched before decoding it (or :func:`decode_fetched`), so the look-up
runs in a thread with a bounded timeout, never on the event loop: decoding on an event loop never
calls the registry, and a record whose id was not prefetched is refused (:class:`CodecError`, so a
dead letter or a skipped record naming it) instead of stalling the loop. Writers the same:
``slipstream.streams.kafka`` registers a topic's schema with :func:`preregister` (in a thread) before encoding,
and :func:`encode` on an event loop refuses a schema not registered yet instead of calling.

**Typed records**: :func:`decode_typed` returns the record's class of ``slipstream.schemas.records``
(a frozen dataclass built from the ``.avsc``); :func:`encode` takes one of those or a mapping. The
bytes are the same either way.

Decoding is strict: a missing header, an unknown record type, a truncated body or trailing bytes raise
:class:`CodecError` naming the problem; nothing half-read is returned.

Schema evolution: every record is read with its *writer's* schema, resolved to the reader's by Avro's
rules (fastavro: fields matched by name, whatever their order; a field the writer lacks takes the
reader's default; a field the reader lacks is skipped; types promoted as the specification allows).
The writer schema is the one its header names: a single-object fingerprint of this reader's schema,
of a generation in ``schemas/history/`` or of ``schemas.LEGACY_FINGERPRINTS``; or a Confluent schema
id, fetched from the registry. A record whose writer schema cannot be had (a fingerprint none of those
has, a registry that does not know the id), or does not resolve to the reader's, raises
:class:`CodecError` naming the fingerprint or id and why (the stage worker dead-letters it): a record
is never read with a schema it was not written with. So an old reader cannot read a newer writer's
single-object records: ship the new schema to readers first (``schemas/history``), or write through
the registry.
"""
from __future__ import annotations

import asyncio
import io
import json
import struct
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Iterable, Mapping

import fastavro
from fastavro.read import SchemaResolutionError
from fastavro.schema import fingerprint, to_parsing_canonical_form

from .. import schemas
from ..schemas import records
from .schema_registry import RegistryError, SchemaRegistry


MAGIC = b"\xc3\x01"
HEADER_LEN = 10
CONFLUENT_MAGIC = b"\x00"
CONFLUENT_HEADER_LEN = 5
_REGISTRY: SchemaRegistry | None = None
_BY_ID: dict[tuple[str, int], Mapping[str, Any]] = {}  # (record, schema id) -> writer, for _REGISTRY


class CodecError(ValueError):
    """Bytes that are not a valid record of the expected type."""


def schema_fingerprint(parsed: Mapping[str, Any]) -> bytes:
    """The single-object header's 8 fingerprint bytes: fastavro's hex is already little-endian."""
    return bytes.fromhex(fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"))


@dataclass
class RecordCodec:
    """Encoder/decoder of one record type (``InferenceRequest`` ...)."""

    record: str
    schema: Mapping[str, Any]
    known_writers: dict[bytes, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.fp = schema_fingerprint(self.schema)
        self.known_writers.setdefault(self.fp, self.schema)

    def add_writer(self, writer_schema: Mapping[str, Any]) -> None:
        """Accept records written with an older (or newer) generation of this record's schema."""
        self.known_writers[schema_fingerprint(writer_schema)] = writer_schema

    def encode(self, value: Mapping[str, Any] | records.Record) -> bytes:
        """Single-object encoding."""
        return self._write(MAGIC + self.fp, value)

    def encode_confluent(self, value: Mapping[str, Any] | records.Record, schema_id: int) -> bytes:
        """The Confluent wire format, for the registry's ``schema_id`` of this codec's schema."""
        return self._write(CONFLUENT_MAGIC + schema_id.to_bytes(4, "big"), value)

    def _write(self, header: bytes, value: Mapping[str, Any] | records.Record) -> bytes:
        if isinstance(value, records.Record):
            value = value.to_dict()
        buf = io.BytesIO()
        buf.write(header)
        try:
            fastavro.schemaless_writer(buf, self.schema, value, strict_allow_default=True)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError, struct.error) as exc:
            raise CodecError(f"cannot encode {self.record}: {type(exc).__name__}: {exc}") from None
        return buf.getvalue()

    def decode(self, data: bytes | None) -> dict[str, Any]:
        if data is None:
            raise CodecError(f"{self.record}: empty record (null value)")
        if len(data) >= CONFLUENT_HEADER_LEN and data[:1] == CONFLUENT_MAGIC:
            writer, start = self._registered_writer(int.from_bytes(data[1:5], "big")), CONFLUENT_HEADER_LEN
        elif len(data) >= HEADER_LEN and data[:2] == MAGIC:
            writer, start = self._known_writer(bytes(data[2:HEADER_LEN])), HEADER_LEN
        else:
            raise CodecError(f"not a Slipstream {self.record}: expected the Avro single-object header "
                             f"C3 01 or the Confluent header 00, got {bytes(data[:2]).hex(' ') or 'nothing'} "
                             f"({len(data)} bytes)")
        body = io.BytesIO(data)  # shares the bytes (no copy of the payload), read from the header's end
        body.seek(start)
        try:
            # the reader schema only when it differs: fastavro compares the two schemas on every call
            value = fastavro.schemaless_reader(body, writer, None if writer is self.schema else self.schema)
        except (EOFError, StopIteration) as exc:
            raise CodecError(f"{self.record}: truncated body ({len(data)} bytes): {exc}") from None
        except SchemaResolutionError as exc:
            raise CodecError(f"{self.record}: writer schema ({bytes(data[:start]).hex(' ')}) does not resolve "
                             f"to this reader's: {exc}") from None
        except Exception as exc:  # fastavro raises assorted types on garbage (UnicodeDecodeError, ...)
            raise CodecError(f"{self.record}: undecodable body: {type(exc).__name__}: {exc}") from None
        left = len(data) - body.tell()
        if left:
            raise CodecError(f"{self.record}: {left} trailing bytes after the record")
        return value

    def _known_writer(self, fp: bytes) -> Mapping[str, Any]:
        """The writer schema of a single-object fingerprint (this schema, a history generation, a
        legacy fingerprint); CodecError naming the fingerprint when there is none."""
        writer = self.known_writers.get(fp)
        if writer is None:
            raise CodecError(f"{self.record}: unknown writer schema, fingerprint {fp.hex()} (CRC-64-AVRO, "
                             f"little-endian): not this reader's schema nor one in schemas/history, so it "
                             f"cannot be resolved")
        return writer

    def _registered_writer(self, schema_id: int) -> Mapping[str, Any]:
        """The writer schema of a Confluent schema id: a known generation when the registry's schema
        has its fingerprint (no resolution needed for our own records), else the registry's schema."""
        if _REGISTRY is None:  # garbage starting with 00 lands here too
            raise CodecError(f"not a Slipstream {self.record}: expected the Avro single-object header C3 01, "
                             f"got 00: a record in the Confluent wire format (schema id {schema_id}) needs a "
                             f"schema registry (SLIPSTREAM_SCHEMA_REGISTRY_URL)")
        writer = _BY_ID.get((self.record, schema_id))
        if writer is None:
            if not _REGISTRY.cached(schema_id) and _on_event_loop():
                raise CodecError(f"{self.record}: writer schema id {schema_id} not looked up: on the event loop "
                                 f"a record is read only with schemas prefetched off it (slipstream.streams.codec.prefetch), "
                                 f"never with a blocking registry call")
            try:
                registered = _REGISTRY.schema(schema_id)  # cached, failures too; prefetch() fetched it
            except RegistryError as exc:
                raise CodecError(f"{self.record}: writer schema id {schema_id}: {exc}") from None
            writer = _BY_ID[(self.record, schema_id)] = self.known_writers.get(
                schema_fingerprint(registered), registered)
        return writer


def _on_event_loop() -> bool:
    """Whether this thread runs an asyncio event loop (a blocking call here would stall it)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


_CODECS: dict[str, RecordCodec] = {}


def codec(record: str) -> RecordCodec:
    """The shared codec of a record type, with every schema generation in ``schemas/history`` and
    every legacy fingerprint."""
    c = _CODECS.get(record)
    if c is None:
        c = RecordCodec(record, schemas.load(record))
        for old in schemas.history(record):
            c.add_writer(old)
        for fp, old in schemas.legacy(record):
            c.known_writers[fp] = old
        _CODECS[record] = c
    return c


def use_registry(url: str | None) -> SchemaRegistry | None:
    """Write the Confluent wire format through the registry at ``url`` from now on (None: single-object
    encoding); and read Confluent records with it. Returns the registry client."""
    global _REGISTRY
    _REGISTRY = SchemaRegistry(url) if url else None
    _BY_ID.clear()
    return _REGISTRY


@cache
def schema_json(record: str) -> str:
    """The schema registered for ``record``: its ``.avsc`` with nested records expanded (self-contained)."""
    return json.dumps(schemas.expanded(schemas.raw(record)))


def encode(record: str, value: Mapping[str, Any] | records.Record, topic: str | None = None) -> bytes:
    """``value`` (a mapping or the record's class) as ``record``: the Confluent wire format under ``<topic>-value`` when a registry is set
    and the topic is known, else single-object encoding."""
    c = codec(record)
    if _REGISTRY is None or topic is None:
        return c.encode(value)
    if not _REGISTRY.registered(f"{topic}-value", schema_json(record)) and _on_event_loop():
        raise CodecError(f"cannot encode {record} for {topic}: its schema is not registered yet: on the event "
                         f"loop a record is written only with a schema registered off it (slipstream.streams.codec."
                         f"preregister), never with a blocking registry call")
    try:
        schema_id = _REGISTRY.register(f"{topic}-value", schema_json(record))
    except RegistryError as exc:
        raise CodecError(f"cannot encode {record} for {topic}: {exc}") from None
    return c.encode_confluent(value, schema_id)


def decode(record: str, data: bytes | None) -> dict[str, Any]:
    return codec(record).decode(data)


def decode_typed(record: str, data: bytes | None) -> Any:
    """:func:`decode` into the record's class (``slipstream.schemas.records``)."""
    return records.CLASSES[record].from_dict(codec(record).decode(data))


async def decode_fetched(record: str, data: bytes | None) -> dict[str, Any]:
    """:func:`decode` for a coroutine: the writer schema prefetched off the event loop first."""
    await prefetch([data])
    return codec(record).decode(data)


async def preregister(pairs: Iterable[tuple[str, str]]) -> None:
    """Register, off the event loop, the schemas of the (record, topic) pairs the registry client has
    no id for yet (one thread call each, bounded by the client's timeout; a failure shows when
    :func:`encode` is called). Nothing to do without a registry."""
    registry = _REGISTRY
    if registry is None:
        return
    missing = {(f"{t}-value", schema_json(r)) for r, t in pairs
               if not registry.registered(f"{t}-value", schema_json(r))}
    if missing:
        await asyncio.gather(*(asyncio.to_thread(registry.register, s, j) for s, j in missing),
                             return_exceptions=True)


async def prefetch(values: Iterable[bytes | None]) -> None:
    """Look up, off the event loop, the writer schemas of the Confluent-framed ``values`` the registry
    client has not cached yet (one thread call per id, each bounded by the client's timeout; failures
    are cached by the client, and :func:`decode` then names them). Nothing to do without a registry."""
    registry = _REGISTRY
    if registry is None:
        return
    ids = {int.from_bytes(v[1:5], "big") for v in values
           if v is not None and len(v) >= CONFLUENT_HEADER_LEN and v[:1] == CONFLUENT_MAGIC}
    missing = [i for i in ids if not registry.cached(i)]
    if missing:
        await asyncio.gather(*(asyncio.to_thread(registry.schema, i) for i in missing), return_exceptions=True)


# ----------------------------------------------------------------------------------------------
# Faust registration: value_serializer="avro-<record>" on a topic decodes to dicts with this codec.

FAUST_NAMES = {r: f"avro-{r.lower()}" for r in schemas.NAMES if r != "HopTiming"}


def register_with_faust(records: Iterable[str] = tuple(FAUST_NAMES)) -> None:
    """Register one faust codec per record type (idempotent)."""
    from faust.serializers import codecs as faust_codecs

    for record in records:
        rc = codec(record)

        class _Avro(faust_codecs.Codec):  # noqa: N801 - faust's naming
            def _dumps(self, obj: Any, _rc: RecordCodec = rc) -> bytes:
                return _rc.encode(obj)

            def _loads(self, s: bytes, _rc: RecordCodec = rc) -> Any:
                return _rc.decode(s)

        faust_codecs.register(FAUST_NAMES[record], _Avro())
