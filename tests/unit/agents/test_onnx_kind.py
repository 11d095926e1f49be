"""Bring your own model: the zoo's ``onnx`` kind serves an ONNX file built here with the ``onnx``
helper API (by path, no code change), and a model kind registered by an installed package's entry
point (a real ``.dist-info`` on ``sys.path``) is loaded by ``load_executor``."""
from __future__ import annotations

import hashlib
import io
import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from slipstream.agents import zoo
from slipstream.agents.preprocess import encode_png
from slipstream.streams.spec import Hardware, Variant

CPU1 = Hardware("cpu-1", "cpu", 0.05, 1)
W = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
B = np.array([1.0, -1.0, 0.5], dtype=np.float32)


def linear_onnx(path: Path, dims=(None, 4)) -> Path:
    """y = x @ W + b, x: [batch, 4] float32 (``dims`` sets the declared input shape)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])],
        "linear", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", *dims[1:]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=10), path)  # onnxruntime 1.31 reads IR <= 13
    return path


def channel_mean_onnx(path: Path) -> Path:
    """y = mean of each channel, x: [batch, 3, 6, 10] float32 (not square: height 6, width 10)."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("ReduceMean", ["x"], ["y"], axes=[2, 3], keepdims=0)], "means",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 6, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=10), path)  # onnxruntime 1.31 reads IR <= 13
    return path


def load(params):
    return zoo.load_executor(Variant("mine", "onnx", 0.9, params), CPU1, cache_dir="/nonexistent")


def npy(arr) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.asarray(arr), allow_pickle=False)
    return buf.getvalue()


def from_npy(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(data), allow_pickle=False)


def test_user_onnx_file_by_path_runs_and_carries_its_digest(tmp_path):
    path = linear_onnx(tmp_path / "linear.onnx")
    ex = load({"path": str(path)})
    xs = [np.array([1, 2, 3, 4], np.float32), np.array([0, 0, 0, 1], np.float32)]
    out = ex.run([npy(x) for x in xs])
    for x, item in zip(xs, out):
        (emit,) = item.emits
        assert emit.content_type == "application/x-npy"
        np.testing.assert_allclose(from_npy(emit.payload), x @ W + B, rtol=1e-6)
    assert ex.digest == hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    assert ex.device == "cpu" and ex.check(ex.example_payload()) is None
    assert len(ex.run([ex.example_payload()])) == 1


def test_raw_float32_with_declared_shape_and_top5(tmp_path):
    path = linear_onnx(tmp_path / "dyn.onnx", dims=(None, "features"))
    ex = load({"path": str(path), "content_type": "application/octet-stream", "shape": [4],
               "emit": "top5"})
    x = np.array([1, 2, 3, 4], "<f4")
    top = json.loads(ex.run([x.tobytes()])[0].emits[0].payload)["top5"]
    assert [c for c, _ in top] == list(np.argsort(-(x @ W + B)))
    assert "expected 16" in ex.check(b"\x00" * 12)


def test_images_are_resized_to_the_model_input_and_normalised(tmp_path):
    ex = load({"path": str(channel_mean_onnx(tmp_path / "m.onnx")), "content_type": "image/*"})
    pixels = np.zeros((20, 30, 3), np.uint8)
    pixels[..., 0], pixels[..., 2] = 255, 51  # red 1.0, green 0, blue 0.2 after / 255
    means = from_npy(ex.run([encode_png(pixels)])[0].emits[0].payload)
    np.testing.assert_allclose(means, [1.0, 0.0, 0.2], atol=1e-6)
    assert "undecodable image" in ex.check(b"not an image!")


@pytest.mark.parametrize("params, match", [
    ({}, "params.path must name an .onnx file"),
    ({"path": "/no/such/model.onnx"}, "params.path '/no/such/model.onnx': no such file"),
    ({"content_type": "text/plain"}, "params.content_type must be one of"),
    ({"input": "z"}, r"params.input 'z' is not one of the model's inputs \['x'\]"),
    ({"output": "z"}, r"params.output 'z' is not one of the model's outputs \['y'\]"),
    ({"emit": "json"}, "params.emit must be one of"),
    ({"shape": [4, 0]}, "params.shape must be a list of positive integers"),
    ({"std": 0}, "params.std must be a number or a list of 3 numbers"),
    ({"colour": 1}, r"unknown params \['colour'\]"),
])
def test_bad_params_are_named(tmp_path, params, match):
    path = str(linear_onnx(tmp_path / "linear.onnx"))
    with pytest.raises(ValueError, match=match):
        load({"path": path, **params} if params and "path" not in params else params)


def test_bad_files_and_shapes_are_named(tmp_path):
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    with pytest.raises(ValueError, match="params.path .*junk.onnx.*onnxruntime cannot load it"):
        load({"path": str(junk)})
    with pytest.raises(ValueError, match="dynamic axes after the batch axis: declare the item shape"):
        load({"path": str(linear_onnx(tmp_path / "dyn.onnx", dims=(None, "f")))})
    ex = load({"path": str(linear_onnx(tmp_path / "linear.onnx"))})
    assert "shape [3], the model takes [4]" in ex.check(npy(np.zeros(3, np.float32)))
    assert "not a .npy array" in ex.check(b"\x93NUMPY garbage")
    pickled = io.BytesIO()
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    assert "not a .npy array" in ex.check(pickled.getvalue())  # no pickle on the wire


# ---- executor plugins (entry points) -----------------------------------------------------------


def install_plugin(root: Path, name: str, body: str) -> None:
    """A real installed distribution as importlib.metadata sees one: a module and a .dist-info."""
    module = f"plugin_{name}"  # one module per test: sys.modules outlives a test's sys.path
    (root / f"{module}.py").write_text(textwrap.dedent(body))
    info = root / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[slipstream.executors]\n{name} = {module}:load\n")


PLUGIN = """
    from slipstream.agents.executors import FunctionExecutor
    from slipstream.streams.executor import Emit

    def load(variant, hardware, params, cache_dir):
        ex = FunctionExecutor(variant.name, lambda p: Emit(p[::-1], "text/plain"), lambda: b"abc")
        ex.digest = "plugin-" + str(params["version"])
        return ex
"""


def test_a_plugin_model_kind_is_loaded_from_its_entry_point(tmp_path, monkeypatch):
    install_plugin(tmp_path, "reverse", PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "reverse" in zoo.plugins()
    ex = zoo.load_executor(Variant("r", "reverse", 1.0, {"version": 3}), CPU1)
    assert ex.run([b"abc"])[0].emits[0].payload == b"cba" and ex.digest == "plugin-3"


def test_a_plugin_may_not_take_a_built_in_name_or_break_the_protocol(tmp_path, monkeypatch):
    install_plugin(tmp_path, "noop", PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="model 'noop' is built in, yet plugin 'plugin_noop:load'"):
        zoo.load_executor(Variant("n", "noop", 1.0, {}), CPU1)


def test_a_plugin_executor_without_the_protocol_is_named(tmp_path, monkeypatch):
    install_plugin(tmp_path, "half", "def load(variant, hardware, params, cache_dir):\n    return object()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TypeError, match=r"lacks \['variant', 'device', 'digest'"):
        zoo.load_executor(Variant("h", "half", 1.0, {}), CPU1)
    with pytest.raises(ValueError, match="unknown model 'absent'.*plugins .* have \\['half'\\]"):
        zoo.load_executor(Variant("a", "absent", 1.0, {}), CPU1)
