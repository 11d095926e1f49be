"""The slim install: the core (client, CLI, planner, tuner, load generator, the data plane's own code)
imports without the model extras. Every module of every package is imported in a fresh interpreter
and none may pull in torch, transformers, tokenizers or onnxruntime: those load only when a model of
theirs is built (``pip install slipstream`` has none of them; see README, Install)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# the CLI's package and every layer, by the names they are installed under (the layers' modules import
# each other relatively, so a layer's folder imported under its bare name would not resolve them)
PACKAGES = ("slipstream", *(f"slipstream.{layer}" for layer in
                            ("streams", "agents", "planner", "tuner", "loadgen", "schemas", "gateway")))
HEAVY = ("torch", "transformers", "tokenizers", "onnxruntime", "onnx", "efficientnet_lite_pytorch")

PROBE = """
import importlib, json, pkgutil, sys
names = []
for pkg in {packages!r}:
    mod = importlib.import_module(pkg)
    names.append(pkg)
    names += [m.name for m in pkgutil.walk_packages(mod.__path__, pkg + ".")]
for name in names:
    importlib.import_module(name)
print(json.dumps({{"modules": len(names), "heavy": sorted(h for h in {heavy!r} if h in sys.modules)}}))
"""


def test_no_module_imports_a_model_library_at_import_time():
    out = subprocess.run([sys.executable, "-c", PROBE.format(packages=PACKAGES, heavy=HEAVY)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "SLIPSTREAM_PIPELINE": ""})
    assert out.returncode == 0, out.stderr[-2000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["modules"] > 50
    assert found["heavy"] == [], f"imported at module level: {found['heavy']}"
