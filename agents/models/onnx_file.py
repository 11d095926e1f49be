"""Your own ONNX model (zoo kind ``onnx``): a ``.onnx`` file named by ``params.path``, served by
onnxruntime with no code change. The file's sha256 (short) is the executor's ``digest``.

What a payload holds is declared by ``params.content_type`` (an executor sees only bytes):

- ``application/x-npy``: a NumPy ``.npy`` array (read with ``allow_pickle=False``) of the item shape;
- ``application/octet-stream``: raw little-endian float32 values, ``4 * prod(shape)`` bytes;
- ``image/*``: any image pillow reads (or raw square RGB), resized to the item shape's height and
  width (``[3, H, W]`` channels first, ``[H, W, 3]`` channels last), then ``(x - mean) / std``.

The item shape is ``params.shape``, else the model input's shape without the batch axis (every axis
must then be fixed). Outputs: ``params.emit: tensor`` gives the item's row of the output as ``.npy``
bytes (``application/x-npy``), ``top5`` the softmax top-5 JSON of the built-in classifiers.
"""
from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ...streams.executor import Emit, ItemOutput
from ..preprocess import decode_image, encode_png, synthetic_image
from .efficientnet import JSON_TYPE, top_k_json

NPY_TYPE = "application/x-npy"
RAW_TYPE = "application/octet-stream"
CONTENT_TYPES = (NPY_TYPE, RAW_TYPE, "image/*")
EMITS = ("tensor", "top5")
# uri: where the Kubernetes manifests' init container fetches params.path from (slipstream.model_fetch);
# the worker itself reads only params.path
PARAMS = {"path": None, "input": None, "output": None, "content_type": NPY_TYPE, "shape": None,
          "mean": 0.0, "std": 255.0, "emit": "tensor", "uri": None}
DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
          "tensor(uint8)": np.uint8, "tensor(int8)": np.int8, "tensor(int32)": np.int32,
          "tensor(int64)": np.int64}


def model_path(params: Mapping[str, Any]) -> Path:
    """``params.path`` (``~`` expanded, relative to the worker's working directory), checked."""
    raw = params["path"]
    if not isinstance(raw, str) or not raw:
        raise ValueError(f"onnx: params.path must name an .onnx file, got {raw!r}")
    path = Path(raw).expanduser().resolve()
    if not path.is_file():
        raise ValueError(f"onnx: params.path {raw!r}: no such file ({path})")
    return path


def pick(names: list[str], wanted: Any, what: str) -> str:
    """The model's input or output named ``wanted``; the only one when ``wanted`` is None."""
    if wanted is None:
        if len(names) != 1 and what == "input":
            raise ValueError(f"onnx: the model has inputs {names}: the onnx kind feeds one; name it "
                             f"in params.input (the others must be optional)")
        return names[0]
    if wanted not in names:
        raise ValueError(f"onnx: params.{what} {wanted!r} is not one of the model's {what}s {names}")
    return wanted


def item_shape(declared: Any, model_shape: list[Any]) -> tuple[int, ...]:
    """``params.shape`` if given, else the model input's shape without its batch axis."""
    if declared is not None:
        if (not isinstance(declared, (list, tuple)) or not declared
                or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in declared)):
            raise ValueError(f"onnx: params.shape must be a list of positive integers, got {declared!r}")
        return tuple(declared)
    rest = model_shape[1:]
    if not all(isinstance(d, int) and d > 0 for d in rest):
        raise ValueError(f"onnx: the model input's shape {model_shape} has dynamic axes after the "
                         f"batch axis: declare the item shape in params.shape")
    return tuple(rest)


def channel_values(value: Any, name: str) -> np.ndarray:
    """``params.mean`` / ``params.std``: a number or one per channel (3)."""
    arr = np.asarray(value, dtype=np.float32) if isinstance(value, (int, float, list)) else None
    if arr is None or arr.shape not in ((), (3,)) or (name == "std" and np.any(arr == 0)):
        raise ValueError(f"onnx: params.{name} must be a number or a list of 3 numbers"
                         f"{' (non-zero)' if name == 'std' else ''}, got {value!r}")
    return arr


@dataclass
class OnnxFileCodec:
    """Payload bytes -> one item of the model input; an output row -> ``.npy`` bytes or top-5 JSON."""

    input_name: str
    shape: tuple[int, ...]
    dtype: Any
    content_type: str
    emit: str = "tensor"
    mean: np.ndarray | float = 0.0
    std: np.ndarray | float = 255.0

    def __post_init__(self) -> None:
        if self.content_type not in CONTENT_TYPES:
            raise ValueError(f"onnx: params.content_type must be one of {list(CONTENT_TYPES)}, "
                             f"got {self.content_type!r}")
        if self.emit not in EMITS:
            raise ValueError(f"onnx: params.emit must be one of {list(EMITS)}, got {self.emit!r}")
        if self.content_type == "image/*":
            self.channels_first = self.shape[:1] == (3,)
            if len(self.shape) != 3 or not (self.channels_first or self.shape[2] == 3):
                raise ValueError(f"onnx: content_type image/* needs an item shape [3, H, W] or "
                                 f"[H, W, 3], got {list(self.shape)}")

    @property
    def size(self) -> tuple[int, int]:
        """(height, width) of an image item."""
        return (self.shape[1], self.shape[2]) if self.channels_first else (self.shape[0], self.shape[1])

    def decode(self, payload: bytes) -> np.ndarray:
        if self.content_type == NPY_TYPE:
            try:
                arr = np.load(io.BytesIO(payload), allow_pickle=False)
            except (ValueError, OSError, EOFError) as exc:
                raise ValueError(f"onnx: payload is not a .npy array: {exc}") from None
        elif self.content_type == RAW_TYPE:
            need = 4 * math.prod(self.shape)
            if len(payload) != need:
                raise ValueError(f"onnx: payload has {len(payload)} bytes, expected {need} "
                                 f"(float32 little-endian of shape {list(self.shape)})")
            arr = np.frombuffer(payload, dtype="<f4").reshape(self.shape)
        else:
            pixels = _resize_rect(decode_image(payload), *self.size)
            arr = (pixels.astype(np.float32) - self.mean) / self.std
            arr = arr.transpose(2, 0, 1) if self.channels_first else arr
        if arr.shape != self.shape:
            raise ValueError(f"onnx: payload array has shape {list(arr.shape)}, the model takes "
                             f"{list(self.shape)}")
        return arr.astype(self.dtype, copy=False)

    def collate(self, items: list[np.ndarray]) -> dict[str, np.ndarray]:
        return {self.input_name: np.ascontiguousarray(np.stack(items))}

    def encode(self, row: np.ndarray, payload: bytes) -> ItemOutput:
        if self.emit == "top5":
            return ItemOutput((Emit(top_k_json(np.ravel(row)), JSON_TYPE),))
        buf = io.BytesIO()
        np.save(buf, np.asarray(row), allow_pickle=False)
        return ItemOutput((Emit(buf.getvalue(), NPY_TYPE),))

    def example_payload(self) -> bytes:
        if self.content_type == "image/*":
            return encode_png(_resize_rect(synthetic_image(max(self.size)), *self.size))
        arr = np.random.default_rng(0).random(self.shape, dtype=np.float32)
        if self.content_type == RAW_TYPE:
            return arr.astype("<f4").tobytes()
        buf = io.BytesIO()
        np.save(buf, arr, allow_pickle=False)
        return buf.getvalue()


def _resize_rect(pixels: np.ndarray, height: int, width: int) -> np.ndarray:
    from PIL import Image

    if pixels.shape[:2] == (height, width):
        return pixels
    return np.asarray(Image.fromarray(pixels).resize((width, height), Image.BILINEAR), dtype=np.uint8)
