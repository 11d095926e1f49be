"""Preprocessing: payload decoding shared by the zoo's codecs, and the two model-free preprocessing
stages (``image-resize``, ``tokenize``), which are stages like any other.

Payload formats (an executor sees only bytes, so images are recognised by their content):

- ``image/png``, ``image/jpeg`` (and anything else pillow opens): recognised by pillow.
- ``image/x-raw-uint8;shape=H,W,3``: raw RGB pixels, row-major, no header. Only square images are
  recognised (``len == 3*S*S``), which is what ``image-resize`` emits; it is the cheapest input for
  load tests because nothing is decoded.
- ``text/plain`` utf-8 text; ``application/x-token-ids``: int32 little-endian token ids (what
  ``tokenize`` emits, [CLS] ... [SEP] included).
"""
from __future__ import annotations

import hashlib
import io
import math
from pathlib import Path

import numpy as np

from ..streams.executor import Emit

RAW_IMAGE_TYPE = "image/x-raw-uint8"
TOKEN_IDS_TYPE = "application/x-token-ids"
TEXT_TYPE = "text/plain; charset=utf-8"

# Signatures pillow would recognise; checked before the raw-size rule so a PNG whose byte count
# happens to be 3*S*S is still a PNG.
_IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"BM", b"RIFF")


class BatchBuffer:
    """A model input reused from batch to batch: each item is written into its row in place, so a
    batch is assembled without a per-item array and without a stacking copy. Capacity grows in powers
    of two and is never given back; ``rows(n)`` is a view of the first ``n`` rows. One buffer per
    executor (an executor runs one batch at a time, on its replica's thread)."""

    def __init__(self, item_shape: tuple[int, ...], dtype=np.float32) -> None:
        self.item_shape, self.dtype = tuple(item_shape), np.dtype(dtype)
        self._buf = np.empty((0, *self.item_shape), self.dtype)

    def rows(self, n: int) -> np.ndarray:
        if n > len(self._buf):
            self._buf = np.empty((1 << max(n - 1, 0).bit_length(), *self.item_shape), self.dtype)
        return self._buf[:n]


def raw_image_type(height: int, width: int) -> str:
    return f"{RAW_IMAGE_TYPE};shape={height},{width},3"


def raw_square_side(n_bytes: int) -> int | None:
    """S when ``n_bytes`` is a raw S x S RGB image, else None."""
    if n_bytes <= 0 or n_bytes % 3:
        return None
    side = math.isqrt(n_bytes // 3)
    return side if side * side * 3 == n_bytes else None


def decode_image(payload: bytes) -> np.ndarray:
    """Any supported image payload -> HxWx3 uint8 RGB. Raises ValueError naming the problem."""
    img = _open(payload)
    return img if isinstance(img, np.ndarray) else np.asarray(img, dtype=np.uint8)


def _open(payload: bytes):
    """Raw square uint8 RGB as an array (no copy), anything else as a decoded RGB pillow image."""
    if not payload:
        raise ValueError("empty payload: expected an image (PNG/JPEG bytes or raw uint8 RGB)")
    if not payload.startswith(_IMAGE_MAGIC):
        side = raw_square_side(len(payload))
        if side is not None:
            return np.frombuffer(payload, dtype=np.uint8).reshape(side, side, 3)
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(payload)) as img:
            return img.convert("RGB")
    except (UnidentifiedImageError, OSError, SyntaxError) as exc:
        raise ValueError(f"undecodable image: {len(payload)} bytes are neither an image pillow can "
                         f"read nor raw uint8 RGB of a square size (3*S*S bytes): {exc}") from None


def resized_bytes(payload: bytes, size: int) -> bytes:
    """Any supported image payload -> size x size x 3 uint8 RGB bytes (bilinear), as
    ``resize_image(decode_image(payload), size).tobytes()`` gives them, without the copies through
    numpy (a 480 x 480 JPEG: three copies of 0.7 MB fewer)."""
    from PIL import Image

    img = _open(payload)
    if isinstance(img, np.ndarray):
        if img.shape[:2] == (size, size):
            return payload
        img = Image.fromarray(img)
    if img.size != (size, size):
        img = img.resize((size, size), Image.BILINEAR)
    return img.tobytes()


def resize_image(pixels: np.ndarray, size: int) -> np.ndarray:
    """HxWx3 uint8 -> size x size x 3 uint8 (bilinear); a no-op when already that size."""
    if pixels.shape[:2] == (size, size):
        return pixels
    from PIL import Image

    return np.asarray(Image.fromarray(pixels).resize((size, size), Image.BILINEAR), dtype=np.uint8)


def synthetic_image(size: int, seed: int = 0) -> np.ndarray:
    """A deterministic size x size RGB picture (gradients plus a disc), not noise, so encoders and
    classifiers see image-like statistics."""
    y, x = np.mgrid[0:size, 0:size].astype(np.float32) / max(size - 1, 1)
    rng = np.random.default_rng(seed)
    cx, cy, r = rng.uniform(0.3, 0.7), rng.uniform(0.3, 0.7), rng.uniform(0.15, 0.3)
    disc = ((x - cx) ** 2 + (y - cy) ** 2) < r * r
    img = np.stack([x, y, 1.0 - x * y], axis=-1) * 200.0
    img[disc] = rng.uniform(0, 255, size=3)
    return img.clip(0, 255).astype(np.uint8)


def encode_png(pixels: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


def encode_jpeg(pixels: np.ndarray, quality: int = 90) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def decode_text(payload: bytes) -> str:
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"text payload is not valid utf-8: {exc}") from None
    if not text.strip():
        raise ValueError("empty text payload")
    return text


def decode_token_ids(payload: bytes) -> np.ndarray:
    if not payload or len(payload) % 4:
        raise ValueError(f"token-id payload must be a non-empty multiple of 4 bytes (int32 LE), "
                         f"got {len(payload)} bytes")
    return np.frombuffer(payload, dtype="<i4").astype(np.int64)


def payload_unit(payload: bytes, salt: bytes = b"") -> float:
    """A deterministic number in [0, 1) from a payload's hash: the same request always takes the
    same branch, on every replica and on replay."""
    digest = hashlib.blake2b(payload, digest_size=8, key=salt[:64]).digest()
    return int.from_bytes(digest, "little") / 2.0**64


def payload_seed(payload: bytes, salt: bytes = b"") -> int:
    return int.from_bytes(hashlib.blake2b(payload, digest_size=8, key=salt[:64]).digest(), "little")


def featurize(payload: bytes, dim: int) -> np.ndarray:
    """Any bytes -> a float32 vector of length ``dim`` in [0, 1] (bytes tiled or truncated): the
    input of the synthetic models, which accept any payload."""
    if not payload:
        raise ValueError("empty payload: synthetic models need at least one byte")
    raw = np.frombuffer(payload, dtype=np.uint8)
    reps = -(-dim // raw.size)
    return (np.tile(raw, reps)[:dim].astype(np.float32) / 255.0)


# ----------------------------------------------------------------------------------------------
# Preprocessing stages


class ImageResize:
    """``image-resize``: decode any image payload, resize to ``size``, emit raw uint8 pixels."""

    def __init__(self, size: int) -> None:
        if not isinstance(size, int) or not 8 <= size <= 4096:
            raise ValueError(f"image-resize: params.size must be an integer in [8, 4096], got {size!r}")
        self.size = size
        self.content_type = raw_image_type(size, size)

    def __call__(self, payload: bytes) -> Emit:
        return Emit(resized_bytes(payload, self.size), self.content_type)

    def example(self) -> bytes:
        return encode_jpeg(synthetic_image(480))


class Tokenize:
    """``tokenize``: utf-8 text -> WordPiece ids of a tokenizer.json (default: the one shipped with
    all-MiniLM-L6-v2), truncated to ``max_length``, as int32 little-endian bytes."""

    def __init__(self, tokenizer_file: str | Path, max_length: int) -> None:
        from tokenizers import Tokenizer

        if not isinstance(max_length, int) or not 2 <= max_length <= 512:
            raise ValueError(f"tokenize: params.max_length must be an integer in [2, 512], "
                             f"got {max_length!r}")
        self.tokenizer = Tokenizer.from_file(str(tokenizer_file))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length)
        self.max_length = max_length

    def ids(self, text: str) -> np.ndarray:
        return np.asarray(self.tokenizer.encode(text).ids, dtype=np.int64)

    def __call__(self, payload: bytes) -> Emit:
        ids = self.ids(decode_text(payload)).astype("<i4")
        return Emit(ids.tobytes(), TOKEN_IDS_TYPE)

    @staticmethod
    def example() -> bytes:
        return "The quick brown fox jumps over the lazy dog.".encode()
