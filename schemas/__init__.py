"""schemas: the Avro schemas (.avsc) of every message on every Slipstream topic.

This package owns the wire format and nothing else. The data plane and the control plane talk only
through these records. Load a parsed schema with :func:`load`; the codec lives in ``slipstream.streams.codec``.

A record that nests another (``InferenceRequest`` and ``InferenceResult`` hold ``HopTiming``s) names it
in its ``.avsc``; :func:`expanded` inlines the definition at its first use, as the Avro specification's
Parsing Canonical Form does, so fingerprints are the ones any Avro library computes from these files.

Evolution rule: a new field is added with a default (and, for a union, ``null`` first), so old readers
skip it and new readers fill it in for old records. Never rename or retype a field; add a new one.
An earlier generation is kept in ``schemas/history/<name>.v<N>.avsc``; one that nests a record that has
changed since names the generation it was written with in ``"x-nested": {"HopTiming":
"history/HopTiming.v1.avsc"}`` (an extra attribute, which Parsing Canonical Form leaves out).
"""
from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

NAMES = ("HopTiming", "InferenceRequest", "InferenceResult", "StageConfig", "DeadLetter", "ScalingAction",
         "TunerHandoff")
NAMESPACE = "slipstream"

# Fingerprints the codec wrote before it followed the specification (up to commit 809bab9): the
# CRC-64-AVRO of fastavro's canonical form with HopTiming left as a name, packed big-endian. Header
# bytes (hex) -> the schema file (under schemas/) the record was written with. Still read, never written.
LEGACY_FINGERPRINTS = {
    "ab181e7d59cd33f5": "history/HopTiming.v1.avsc",
    "2e02056cb88f632a": "history/InferenceRequest.v1.avsc",
    "1112bdf977d703ad": "history/InferenceResult.v2.avsc",
    "2fda2be9f049a49e": "history/InferenceResult.v1.avsc",
    "9eeec2d31542aa40": "history/StageConfig.v1.avsc",
    "9d738d07f259d9d5": "DeadLetter.avsc",
    "66ce55bf280f0f0b": "ScalingAction.avsc",
    "eedccb6ec1f17f29": "history/TunerHandoff.v1.avsc",
}


def raw(name: str) -> dict:
    """The schema ``name`` as written in ``schemas/<name>.avsc`` (nested types by name)."""
    return read(f"{name}.avsc")


def read(file: str) -> dict:
    """A schema file under ``schemas/`` (e.g. ``history/InferenceResult.v1.avsc``) as JSON."""
    return json.loads(resources.files(__package__).joinpath(file).read_text())


def expanded(doc: Any, namespace: str = NAMESPACE, seen: set[str] | None = None,
             nested: dict[str, str] | None = None) -> Any:
    """``doc`` with every reference to another schema of this package replaced by its definition at
    the first use (later uses stay names), as Parsing Canonical Form expands named types. A history
    file's ``x-nested`` picks the generation of a nested record (default: the current one)."""
    seen = set() if seen is None else seen
    if isinstance(doc, dict) and "x-nested" in doc:
        nested = {**(nested or {}), **doc["x-nested"]}
    if isinstance(doc, str):
        full = doc if "." in doc else f"{namespace}.{doc}"
        short = full.rsplit(".", 1)[-1]
        if full.startswith(f"{NAMESPACE}.") and short in NAMES and full not in seen:
            target = read(nested[short]) if nested and short in nested else raw(short)
            return expanded(target, namespace, seen, nested)
        return doc
    if isinstance(doc, list):
        return [expanded(d, namespace, seen, nested) for d in doc]
    if not isinstance(doc, dict):
        return doc
    if doc.get("type") in ("record", "error", "enum", "fixed"):
        namespace = doc.get("namespace", namespace)
        name = doc["name"]
        seen.add(name if "." in name else f"{namespace}.{name}")
    out = dict(doc)
    if "fields" in doc:
        out["fields"] = [{**f, "type": expanded(f["type"], namespace, seen, nested)} for f in doc["fields"]]
    for key in ("items", "values"):
        if key in doc:
            out[key] = expanded(doc[key], namespace, seen, nested)
    if isinstance(doc.get("type"), (dict, list)):
        out["type"] = expanded(doc["type"], namespace, seen, nested)
    return out


def parse(doc: dict) -> dict:
    """A schema document, expanded and parsed by fastavro."""
    import fastavro

    return fastavro.parse_schema(expanded(doc))


def history(name: str) -> list[dict]:
    """Earlier generations of ``name`` (``schemas/history/<name>.v<N>.avsc``), parsed, oldest first."""
    folder = resources.files(__package__).joinpath("history")
    if not folder.is_dir():
        return []
    return [parse(json.loads(e.read_text())) for e in sorted(folder.iterdir(), key=lambda e: e.name)
            if e.name.startswith(f"{name}.v") and e.name.endswith(".avsc")]


def legacy(name: str) -> list[tuple[bytes, dict]]:
    """(old header fingerprint, parsed writer schema) of every legacy generation of ``name``."""
    return [(bytes.fromhex(fp), parse(read(file))) for fp, file in LEGACY_FINGERPRINTS.items()
            if file.rsplit("/", 1)[-1].split(".")[0] == name]


@cache
def load(name: str) -> dict:
    """The parsed (fastavro) schema ``name``, nested types expanded at their first use."""
    if name not in NAMES:
        raise KeyError(f"unknown schema {name!r}; known: {', '.join(NAMES)}")
    return parse(raw(name))
