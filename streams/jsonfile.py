"""Versioned JSON files (the profile store's profiles and calibrations): atomic writes, and reads that
name the file and the problem."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping


def write_atomic(path: Path, doc: Mapping[str, Any]) -> Path:
    """``doc`` as indented JSON at ``path``, via a temporary file renamed over it."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)
    return path


def read_versioned(path: Path, format_version: int, error: type[ValueError], what: str) -> dict:
    """The JSON object at ``path``; ``error`` names the file when it is unreadable or of another format."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise error(f"{path}: unreadable {what}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != format_version:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise error(f"{path}: format: expected {format_version}, got {got!r}")
    return doc
