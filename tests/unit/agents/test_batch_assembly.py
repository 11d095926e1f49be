"""Fewer copies: batches assembled in place in a reused buffer, and onnxruntime I/O binding (the CUDA
path, run here on the CPU execution provider, which supports the same calls)."""
from pathlib import Path

import numpy as np

from slipstream.agents.executors import ModelExecutor, OrtBackend
from slipstream.agents.models.efficientnet import ImageClassifierCodec, to_input
from slipstream.agents.preprocess import BatchBuffer, synthetic_image
from slipstream.streams.spec import Hardware
from tests.unit.agents.test_onnx_kind import B, W, linear_onnx

CPU = Hardware("cpu-1", "cpu", 0.0, 1)


def test_the_buffer_is_reused_and_grows_in_powers_of_two():
    buf = BatchBuffer((2, 3))
    a = buf.rows(3)
    assert a.shape == (3, 2, 3) and a.dtype == np.float32
    assert np.shares_memory(a, buf.rows(4)) and np.shares_memory(a, buf.rows(1))
    assert not np.shares_memory(a, buf.rows(5)) and buf.rows(5).base.shape[0] == 8


def test_decode_into_writes_what_decode_returns():
    codec = ImageClassifierCodec(32)
    for size in (32, 48):  # as is, and resized
        px = synthetic_image(size, seed=size)
        row = np.full((3, 32, 32), np.nan, np.float32)
        codec.decode_into(px.tobytes(), row)
        np.testing.assert_allclose(row, to_input(px, 32), rtol=0, atol=1e-6)


class Capture:
    device, digest = "cpu", ""

    def __init__(self) -> None:
        self.seen = []

    def __call__(self, inputs):
        x = inputs["x"]
        self.seen.append(x)
        return np.zeros((len(x), 4), np.float32)


def test_a_batch_goes_to_the_model_in_the_buffer_without_a_stacking_copy():
    codec, backend = ImageClassifierCodec(16), Capture()
    ex = ModelExecutor("v", codec, backend)
    payloads = [synthetic_image(16, seed=i).tobytes() for i in range(5)]
    ex.run(payloads)
    first = backend.seen[-1].copy()
    ex.run(payloads[:3])
    assert np.shares_memory(backend.seen[0], backend.seen[1])  # the same memory, batch after batch
    np.testing.assert_allclose(first, np.stack([codec.decode(p) for p in payloads]), atol=1e-6)
    np.testing.assert_allclose(backend.seen[1], np.stack([codec.decode(p) for p in payloads[:3]]), atol=1e-6)


def test_io_binding_gives_what_session_run_gives_and_keeps_one_input_value_per_shape(tmp_path: Path):
    path = linear_onnx(tmp_path / "linear.onnx")
    plain, bound = OrtBackend(path, CPU), OrtBackend(path, CPU, io_binding=True)
    assert plain.bound is None and bound.bound is not None  # default: binding on GPUs only
    rng = np.random.default_rng(0)
    for n in (2, 5, 2):
        x = rng.normal(size=(n, 4)).astype(np.float32)
        got = bound({"x": x})
        np.testing.assert_allclose(got, plain({"x": x}), rtol=1e-6)
        np.testing.assert_allclose(got, x @ W + B, rtol=1e-5)
    assert len(bound.bound.values) == 2  # batch 2 reused its device value
    for n in range(1, 8):  # device values stay bounded however many batch sizes pass
        bound({"x": np.ones((n, 4), np.float32)})
    assert len(bound.bound.values) == bound.bound.KEEP
