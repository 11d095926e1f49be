"""Executors on the CPU: device selection (GPU paths with fake provider lists), the onnxruntime and
torch backends, batching, and per-item validation."""
import json
import logging
import warnings

import numpy as np
import pytest

from slipstream.agents.executors import (CPU_PROVIDER, CUDA_PROVIDER, FunctionExecutor, ModelExecutor,
                              OrtBackend, TorchBackend, device_from_providers, select_providers,
                              select_torch_device)
from slipstream.agents.models import synthetic
from slipstream.agents.models.export import cached_onnx, cache_key
from slipstream.streams.executor import Emit
from slipstream.streams.spec import Hardware

CPU1 = Hardware("cpu-1", "cpu", 0.05, 1)
CPU2 = Hardware("cpu-2", "cpu", 0.10, 2)
GPU = Hardware("gpu", "cuda", 2.5, 1)
SHAPE = synthetic.SyntheticShape(width=32, depth=2, classes=7, seed=11)


@pytest.fixture(scope="module")
def tiny_onnx(tmp_path_factory):
    import torch

    path, hit = cached_onnx(tmp_path_factory.mktemp("onnx"), cache_key("tiny-mlp"),
                            lambda: synthetic.build_torch(SHAPE), lambda: torch.zeros(1, SHAPE.width))
    assert not hit
    return path


# ---- device selection -------------------------------------------------------------------------


def test_cpu_kind_asks_only_for_the_cpu_provider_even_when_cuda_exists():
    choice = select_providers("cpu", [CUDA_PROVIDER, CPU_PROVIDER])
    assert choice.providers == (CPU_PROVIDER,) and choice.wanted_device == "cpu" and not choice.reason


def test_cuda_kind_prefers_cuda_and_keeps_cpu_as_fallback():
    choice = select_providers("cuda", ["TensorrtExecutionProvider", CUDA_PROVIDER, CPU_PROVIDER], 1)
    assert choice.providers == (CUDA_PROVIDER, CPU_PROVIDER)
    assert choice.wanted_device == "cuda:1" and not choice.reason


def test_cuda_kind_without_cuda_provider_says_why():
    choice = select_providers("cuda", [CPU_PROVIDER])
    assert choice.providers == (CPU_PROVIDER,) and choice.wanted_device == "cpu"
    assert "onnxruntime-gpu" in choice.reason


def test_unknown_kind_is_an_error():
    with pytest.raises(ValueError, match="tpu"):
        select_providers("tpu", [CPU_PROVIDER])
    with pytest.raises(ValueError, match="tpu"):
        select_torch_device("tpu", True)


def test_device_comes_from_the_session_providers():
    assert device_from_providers([CUDA_PROVIDER, CPU_PROVIDER], 2) == "cuda:2"
    assert device_from_providers([CPU_PROVIDER]) == "cpu"
    assert device_from_providers([]) == "cpu"


def test_torch_device_selection():
    assert select_torch_device("cuda", True, 1) == ("cuda:1", "")
    device, reason = select_torch_device("cuda", False)
    assert device == "cpu" and "cuda" in reason
    assert select_torch_device("cpu", True) == ("cpu", "")


def test_ort_backend_detects_silent_cpu_fallback(tiny_onnx, caplog):
    # Pretend this onnxruntime offers CUDA: the session still comes up on the CPU here, and the
    # backend must report what it got, with a warning, rather than what it asked for.
    import onnxruntime as ort

    if CUDA_PROVIDER in ort.get_available_providers():
        pytest.skip("this onnxruntime really has CUDA: no fallback to provoke")
    with caplog.at_level(logging.WARNING, logger="slipstream.agents.executors"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # ort's own "not in available providers"
        backend = OrtBackend(tiny_onnx, GPU, available=[CUDA_PROVIDER, CPU_PROVIDER])
    assert backend.providers[0] == CPU_PROVIDER
    assert backend.device == "cpu"
    assert any("not what hardware 'gpu'" in r.getMessage() for r in caplog.records)


def test_ort_backend_on_cpu_does_not_warn_and_uses_hardware_threads(tiny_onnx, caplog):
    with caplog.at_level(logging.WARNING, logger="slipstream.agents.executors"):
        backend = OrtBackend(tiny_onnx, CPU2)
    assert backend.device == "cpu" and not caplog.records
    opts = backend.session.get_session_options()
    assert opts.intra_op_num_threads == 2 and opts.inter_op_num_threads == 1
    assert opts.get_session_config_entry("session.intra_op.allow_spinning") == "0"  # cores shared with other stages


def test_torch_backend_falls_back_with_a_warning(caplog):
    import torch

    before = torch.get_num_threads()
    try:
        with caplog.at_level(logging.WARNING, logger="slipstream.agents.executors"):
            backend = TorchBackend(synthetic.build_torch(SHAPE), GPU, cuda_available=False)
        assert backend.device == "cpu"
        assert any("torch.cuda.is_available() is False" in r.getMessage() for r in caplog.records)
        assert torch.get_num_threads() == GPU.threads
    finally:
        torch.set_num_threads(before)


# ---- model executors ----------------------------------------------------------------------------


def _payloads(n, size=40):
    rng = np.random.default_rng(5)
    return [rng.integers(0, 256, size=size, dtype=np.uint8).tobytes() for _ in range(n)]


def _top(out):
    return json.loads(out.emits[0].payload)["top5"]


def test_onnx_and_torch_backends_agree(tiny_onnx):
    codec = synthetic.SyntheticCodec(SHAPE)
    ort_ex = ModelExecutor("v", codec, OrtBackend(tiny_onnx, CPU1))
    torch_ex = ModelExecutor("v", codec, TorchBackend(synthetic.build_torch(SHAPE), CPU1))
    batch = codec.collate([codec.decode(p) for p in _payloads(6)])
    np.testing.assert_allclose(ort_ex.backend(batch), torch_ex.backend(batch), rtol=1e-4, atol=1e-5)
    for a, b in zip(ort_ex.run(_payloads(6)), torch_ex.run(_payloads(6))):
        assert _top(a)[0][0] == _top(b)[0][0]


def test_run_keeps_order_and_batching_does_not_change_outputs(tiny_onnx):
    ex = ModelExecutor("v", synthetic.SyntheticCodec(SHAPE), OrtBackend(tiny_onnx, CPU1))
    payloads = _payloads(5)
    batched = ex.run(payloads)
    singles = [ex.run([p])[0] for p in payloads]
    assert len(batched) == 5
    for b, s in zip(batched, singles):
        assert [c for c, _ in _top(b)] == [c for c, _ in _top(s)]
        np.testing.assert_allclose([p for _, p in _top(b)], [p for _, p in _top(s)], atol=1e-5)
    # top-5 is a distribution's head: sorted, probabilities in (0, 1]
    probs = [p for _, p in _top(batched[0])]
    assert probs == sorted(probs, reverse=True) and 0 < probs[0] <= 1
    assert ex.run([]) == []


def test_bad_payload_is_caught_per_item_and_fails_the_batch_when_run(tiny_onnx):
    ex = ModelExecutor("v", synthetic.SyntheticCodec(SHAPE), OrtBackend(tiny_onnx, CPU1))
    good = ex.example_payload()
    assert ex.check(good) is None
    assert "empty payload" in ex.check(b"")
    assert "must be bytes" in ex.check("text")
    with pytest.raises(ValueError, match="empty payload"):
        ex.run([good, b""])


class CountingCodec(synthetic.SyntheticCodec):
    """Counts its decodes (the per-item arrays ``collate`` stacks)."""

    def __init__(self, shape) -> None:
        super().__init__(shape)
        self.decodes = 0

    def decode(self, payload: bytes) -> np.ndarray:
        self.decodes += 1
        return super().decode(payload)


class CountingRowCodec(CountingCodec):
    """The same, decoding straight into the executor's batch buffer (``decode_into``)."""

    @property
    def batch_input(self):
        return synthetic.INPUT_NAME, (SHAPE.width,)

    def decode_into(self, payload: bytes, out: np.ndarray) -> None:
        out[:] = self.decode(payload)


@pytest.mark.parametrize("codec", [CountingCodec, CountingRowCodec])
def test_run_checked_decodes_each_payload_once_and_runs_the_model_on_the_good_ones(tiny_onnx, codec):
    ex = ModelExecutor("v", codec(SHAPE), OrtBackend(tiny_onnx, CPU1))
    a, b = _payloads(2)
    want = [_top(o) for o in ex.run([a, b])]
    ex.codec.decodes = 0
    reasons, outs = ex.run_checked([a, b"", "text", b])
    assert reasons[0] is None and reasons[3] is None
    assert "empty payload" in reasons[1] and "must be bytes" in reasons[2]
    assert [_top(o) for o in outs] == want  # a refused payload's row is not left in the batch
    assert ex.codec.decodes == 3  # a, b"" (refused) and b: once each
    assert ex.run_checked([b""]) == (["empty payload: synthetic models need at least one byte"], [])


def test_model_returning_wrong_row_count_raises():
    class Broken:
        device = "cpu"
        digest = ""

        def __call__(self, inputs):
            return np.zeros((1, 3), dtype=np.float32)

        def close(self):
            pass

    ex = ModelExecutor("v", synthetic.SyntheticCodec(SHAPE), Broken())
    with pytest.raises(RuntimeError, match="1 rows for 2 inputs"):
        ex.run(_payloads(2))


def test_a_function_executors_run_checked_calls_the_function_once_per_payload():
    seen = []

    def upper(p: bytes) -> Emit:
        seen.append(p)
        if not p:
            raise ValueError("empty")
        return Emit(p.upper(), "text/plain")

    ex = FunctionExecutor("up", upper, lambda: b"abc", validate=lambda p: upper(p))
    reasons, outs = ex.run_checked([b"ab", b"", b"cd"])
    assert reasons == [None, "empty", None] and [o.emits[0].payload for o in outs] == [b"AB", b"CD"]
    assert seen == [b"ab", b"", b"cd"]  # not validated first and run again


def test_function_executor_runs_per_item_and_validates_separately():
    seen = []

    def upper(p: bytes) -> Emit:
        seen.append(p)
        return Emit(p.upper(), "text/plain")

    def validate(p: bytes) -> None:
        if not p:
            raise ValueError("empty")

    ex = FunctionExecutor("up", upper, lambda: b"abc", validate=validate)
    out = ex.run([b"ab", b"cd"])
    assert [o.emits[0].payload for o in out] == [b"AB", b"CD"]
    assert ex.check(b"") == "empty" and ex.check(b"x") is None
    assert seen == [b"ab", b"cd"]  # check did not call the stage function
    assert ex.device == "cpu" and ex.example_payload() == b"abc"
