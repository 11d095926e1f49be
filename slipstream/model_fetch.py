"""Models delivered to a pod from a URI named in the spec (docs/kubernetes.md, Models): an ``onnx``
variant's ``params.uri`` is fetched to its ``params.path`` by ``slipstream fetch-model``, the init
container the manifests add, and kept only when its sha256 equals the spec's ``params.digest`` (the
full 64 hex digits). The worker then loads the file and checks the same digest again."""
from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.request
from pathlib import Path
from typing import Any, Mapping

from slipstream.agents.executors import is_sha256


def check_sha256(actual: str, expected: str, what: str) -> None:
    """Raise ValueError unless ``actual`` (a sha256 hex digest) is ``expected`` (64 hex digits)."""
    if not is_sha256(expected):
        raise ValueError(f"{what}: params.digest must be the full sha256 (64 hex digits) to fetch a model, "
                         f"got {expected!r}")
    if actual.lower() != expected.lower():
        raise ValueError(f"{what}: sha256 {actual}, but the spec's params.digest is {expected}: not kept")


def fetch(uri: str, out: str | Path, sha256: str, timeout_s: float = 300.0) -> Path:
    """Download ``uri`` (http, https or file) to ``out`` atomically, kept only when its sha256 is
    ``sha256``; returns ``out``."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
    try:
        with os.fdopen(fd, "wb") as f, urllib.request.urlopen(uri, timeout=timeout_s) as src:
            for block in iter(lambda: src.read(1 << 20), b""):
                h.update(block)
                f.write(block)
        check_sha256(h.hexdigest(), sha256, uri)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def fetched_models(params_by_variant: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str, str, str]]:
    """(variant, uri, sha256, path) of each variant whose params name a ``uri``, checked: an absolute
    ``path`` and a full sha256 ``digest``."""
    out = []
    for variant, params in params_by_variant.items():
        uri = params.get("uri")
        if not uri:
            continue
        path, digest = params.get("path"), str(params.get("digest") or "")
        if not isinstance(path, str) or not path.startswith("/"):
            raise ValueError(f"variant {variant!r}: params.uri needs an absolute params.path, got {path!r}")
        if not is_sha256(digest):
            raise ValueError(f"variant {variant!r}: params.uri needs params.digest as the full sha256 "
                             f"(64 hex digits), got {digest!r}")
        out.append((variant, str(uri), digest.lower(), path))
    return out
