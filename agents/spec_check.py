"""The offline checks of a pipeline spec that need the zoo: every ``variant.model`` names a zoo entry
or an installed plugin, every param is one the model takes, and a ``model: onnx`` variant's file
exists and has the digest ``params.digest`` pins. ``slipstream validate`` and the commands that start
workers run them before any process starts; each problem names the file and the field path."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from ..streams.docmodel import did_you_mean
from ..streams.spec import Pipeline, Variant
from .executors import digest_matches, file_digest, is_sha256
from .zoo import PLUGIN_GROUP, ZOO, plugins


def check_models(pipe: Pipeline) -> list[str]:
    """Every problem of ``pipe``'s variants, one line each (empty: all models check out)."""
    problems = []
    installed = plugins()
    for i, stage in enumerate(pipe.stages):
        for j, v in enumerate(stage.variants):
            path = f"{pipe.source_file}: stages[{i}].variants[{j}]"
            problems += [f"{path}.{p}" for p in variant_problems(v, installed)]
    return problems


def variant_problems(v: Variant, installed: Mapping[str, Any]) -> list[str]:
    """A variant's problems, each ``field: what is wrong``."""
    if v.model in installed and v.model not in ZOO:
        return []  # a plugin validates its own params when it loads
    if v.model not in ZOO:
        known = sorted(ZOO) + sorted(installed)
        return [f"model: unknown model {v.model!r}{did_you_mean(v.model, known)}; the zoo has "
                f"{sorted(ZOO)}, plugins (entry points {PLUGIN_GROUP!r}) have {sorted(installed)}"]
    accepted = sorted({*ZOO[v.model].params, "digest"})
    out = [f"params.{k}: unknown parameter of model {v.model!r}{did_you_mean(k, accepted)}; accepted: "
           f"{accepted}" for k in v.params if k not in accepted]
    pin = v.params.get("digest")
    if pin is not None and not isinstance(pin, str):
        out.append(f"params.digest: expected a hex string (quote it in YAML), got {pin!r}")
    if v.model == "onnx":
        out += onnx_problems(v.params)
    return out


def onnx_problems(params: Mapping[str, Any]) -> list[str]:
    """``params.path`` names an existing file (relative to the working directory, as the worker reads
    it) whose sha256 starts with ``params.digest`` when one is given."""
    raw = params.get("path")
    if not isinstance(raw, str) or not raw:
        return [f"params.path: expected the path of an .onnx file, got {raw!r}"]
    path = Path(raw).expanduser().resolve()
    if not path.is_file() and params.get("uri"):  # fetched into the pod (slipstream.model_fetch)
        pin = params.get("digest")
        return [] if isinstance(pin, str) and is_sha256(pin) else [
            f"params.digest: a model fetched from params.uri needs its full sha256 (64 hex digits), got {pin!r}"]
    if not path.is_file():
        return [f"params.path: no such ONNX file {raw!r} ({path})"]
    pin = params.get("digest")
    if isinstance(pin, str) and pin:
        digest = file_digest(path)
        if not digest_matches(digest, pin):
            return [f"params.digest: {raw!r} has digest {digest!r}, but the spec pins {pin!r}"]
    return []
