"""A worker serving an ONNX model loads neither torch nor transformers (export is a separate, cached
step): checked in a fresh interpreter that imports the worker's modules, loads EfficientNet-Lite0 from
the ONNX cache and runs a batch."""
import json
import subprocess
import sys

from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

PREPARE = """
from slipstream.agents.models.export import DEFAULT_CACHE_DIR
from slipstream.agents.zoo import efficientnet_onnx
efficientnet_onnx("efficientnet-lite0", DEFAULT_CACHE_DIR)  # exports (with torch) on a cache miss
"""

SERVE = """
import json, sys
import slipstream.agents.app, slipstream.commands.worker  # the worker process's own modules
from slipstream.agents.zoo import load_executor
from slipstream.streams.spec import Hardware, Variant
ex = load_executor(Variant("lite0", "efficientnet-lite0", 0.75, {"backend": "onnx"}),
                   Hardware("cpu-1", "cpu", 0.0, 1))
assert len(ex.run([ex.example_payload()] * 2)) == 2
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers"))))
"""


def test_an_onnx_serving_worker_imports_neither_torch_nor_transformers():
    subprocess.run([sys.executable, "-c", PREPARE], cwd=ROOT, check=True, timeout=600)
    out = subprocess.run([sys.executable, "-c", SERVE], cwd=ROOT, check=True, timeout=300,
                         capture_output=True, text=True).stdout
    assert json.loads(out.splitlines()[-1]) == []
