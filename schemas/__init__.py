"""schemas: the Avro schemas (.avsc) of every message on every Slipstream topic.

This package owns the wire format and nothing else. The data plane and the control plane talk only
through these records. Load a parsed schema with :func:`load`; the codec lives in ``streams.codec``.

Evolution rule: a new field is added with a default (and, for a union, ``null`` first), so old readers
skip it and new readers fill it in for old records. Never rename or retype a field; add a new one.
"""
from __future__ import annotations

import json
from functools import cache
from importlib import resources

NAMES = ("HopTiming", "InferenceRequest", "InferenceResult", "StageConfig", "DeadLetter", "ScalingAction",
         "TunerHandoff")


def raw(name: str) -> dict:
    """The schema ``name`` as JSON, with named types it references inlined."""
    text = resources.files(__package__).joinpath(f"{name}.avsc").read_text()
    return json.loads(text)


def history(name: str) -> list[dict]:
    """Earlier generations of ``name`` (``schemas/history/<name>.v<N>.avsc``), parsed, oldest first."""
    import fastavro

    folder = resources.files(__package__).joinpath("history")
    if not folder.is_dir():
        return []
    out = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.startswith(f"{name}.v") and entry.name.endswith(".avsc"):
            named: dict = {}
            if name != "HopTiming":
                fastavro.parse_schema(raw("HopTiming"), named_schemas=named)
            out.append(fastavro.parse_schema(json.loads(entry.read_text()), named_schemas=named))
    return out


@cache
def load(name: str) -> dict:
    """The parsed (fastavro) schema ``name``, with its named dependencies resolved."""
    import fastavro

    if name not in NAMES:
        raise KeyError(f"unknown schema {name!r}; known: {', '.join(NAMES)}")
    named: dict = {}
    for dep in ("HopTiming",):
        if dep != name:
            fastavro.parse_schema(raw(dep), named_schemas=named)
    return fastavro.parse_schema(raw(name), named_schemas=named)
