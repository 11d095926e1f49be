"""ONNX export with an on-disk cache: export a torch module once, reuse the ``.onnx`` file after.

The cache key names the model and the versions of everything that shapes the file (model package,
torch, opset), so upgrading a package exports again instead of loading a stale graph. Files are
written to a temporary name in the cache directory and renamed into place (atomic on POSIX), so two
workers exporting at once never read a half-written file.
"""
from __future__ import annotations

import importlib.metadata
import logging
import os
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger(__name__)

DEFAULT_CACHE_DIR = Path("~/.cache/slipstream/models")
OPSET = 17
INPUT_NAME = "x"
OUTPUT_NAME = "y"


def cache_key(model: str, *versions: str) -> str:
    """The cache file name: the model, its package versions, torch's and the opset. torch's version
    is read from its installed metadata, not by importing it: a worker serving a cached ONNX file
    never loads torch (hundreds of MiB resident)."""
    parts = [model, *versions, f"torch{importlib.metadata.version('torch').split('+')[0]}", f"opset{OPSET}"]
    return re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(parts))


def torch_zeros(*shape: int) -> Any:
    """An example input for an export (imports torch: call it only on a cache miss)."""
    import torch

    return torch.zeros(*shape)


def cached_onnx(cache_dir: str | Path, key: str, build: Callable[[], Any],
                example_input: Callable[[], Any]) -> tuple[Path, bool]:
    """The path of ``<cache_dir>/<key>.onnx``, exporting ``build()`` first if it is missing.
    Returns (path, hit): hit is True when the file was already there."""
    cache = Path(cache_dir).expanduser()
    path = cache / f"{key}.onnx"
    if path.is_file() and path.stat().st_size > 0:
        return path, True
    cache.mkdir(parents=True, exist_ok=True)
    import torch

    module = build().eval()
    fd, tmp = tempfile.mkstemp(prefix=f".{key}.", suffix=".onnx.tmp", dir=cache)
    os.close(fd)
    try:
        with warnings.catch_warnings():
            # The TorchScript exporter is chosen on purpose (the dynamo one needs onnxscript); its
            # deprecation notice and constant-folding chatter say nothing about our models.
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", UserWarning)
            torch.onnx.export(module, (example_input(),), tmp, dynamo=False, opset_version=OPSET,
                              input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
                              dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}})
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    log.info("exported %s to %s", key, path)
    return path, False
