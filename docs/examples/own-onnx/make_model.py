"""Serve your own ONNX model, step 1: build a tiny classifier (4 float32 features -> 3 class logits,
``y = x @ W + b``) with the ``onnx`` helper API, write a pipeline spec that serves it with
``model: onnx`` (no code change) pinned to the file's digest, and an example input as a ``.npy`` file.

    python docs/examples/own-onnx/make_model.py DIR     # writes DIR/model.onnx, pipeline.yaml, example.npy

Then see docs/models.md, "Serve your own ONNX model". Needs ``onnx`` (extra ``models``) and numpy.
"""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import onnx
import yaml
from onnx import TensorProto, helper, numpy_helper

W = np.array([[1.0, 0.0, -1.0], [0.5, 1.0, 0.0], [0.0, -0.5, 1.0], [0.2, 0.2, 0.2]], np.float32)
B = np.array([0.0, 0.1, -0.1], np.float32)
EXAMPLE = np.array([1.0, 2.0, 3.0, 4.0], np.float32)


def build_model(path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["features", "W"], ["xw"]),
         helper.make_node("Add", ["xw", "b"], ["logits"])],
        "tiny-classifier",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=10)  # onnxruntime 1.31 reads IR versions up to 13
    onnx.checker.check_model(model)
    onnx.save(model, path)


def digest(path: Path) -> str:
    """The file's model digest as Slipstream names it: the first 12 hex digits of its sha256."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def pipeline_spec(model: Path) -> dict:
    return {
        "name": "own-onnx", "slo_ms": 1000, "input_content_type": "application/x-npy",
        "hardware": {"cpu-1": {"kind": "cpu", "threads": 1, "cost_per_hour": 0.05}},
        "stages": [{
            "name": "score",
            "variants": [{"name": "tiny", "model": "onnx", "accuracy": 0.9,
                          "params": {"path": str(model), "content_type": "application/x-npy",
                                     "emit": "top5", "digest": digest(model)}}],
            "defaults": {"variant": "tiny", "hardware": "cpu-1", "max_batch": 8,
                         "batch_timeout_ms": 2, "partitions": 2}}],
    }


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model = out.resolve() / "model.onnx"
    build_model(model)
    (out / "pipeline.yaml").write_text(yaml.safe_dump(pipeline_spec(model), sort_keys=False))
    np.save(out / "example.npy", EXAMPLE, allow_pickle=False)
    print(f"wrote {model}, {out / 'pipeline.yaml'}, {out / 'example.npy'}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "own-onnx"))
