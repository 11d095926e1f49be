"""Synthetic models of configurable cost: seeded random-weight torch MLPs and CNNs that do real
matrix work (no sleeps), plus the codecs that give them pipeline behaviour: a classifier, a detector
that fans out, a language-ID stage that routes to one child, and a translator.

Any payload is a valid input: its bytes are tiled into the model's input (``featurize``). Every
decision that shapes the pipeline (how many detections, which branch) is drawn from the payload's
hash, so it is deterministic per request, identical on every replica, and has the configured mean
over many requests. Cost scales with ``width`` and ``depth`` (MLP: ~2*depth*width^2 FLOPs per item;
CNN: ~2*depth*9*channels^2*size^2).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from ...streams.executor import Emit, ItemOutput
from ..preprocess import featurize, payload_seed, payload_unit
from .efficientnet import JSON_TYPE, top_k_json
from .export import INPUT_NAME


@dataclass(frozen=True)
class SyntheticShape:
    kind: str = "mlp"  # mlp | cnn
    width: int = 256  # MLP hidden units, or CNN channels
    depth: int = 4  # hidden layers / conv layers
    size: int = 32  # CNN input side (ignored by the MLP)
    classes: int = 10
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("mlp", "cnn"):
            raise ValueError(f"synthetic: params.kind must be 'mlp' or 'cnn', got {self.kind!r}")
        for name, lo, hi in (("width", 1, 16384), ("depth", 1, 256), ("size", 4, 1024),
                             ("classes", 1, 100000)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ValueError(f"synthetic: params.{name} must be an integer in [{lo}, {hi}], got {v!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"synthetic: params.seed must be an integer, got {self.seed!r}")

    @property
    def input_dim(self) -> int:
        return self.width if self.kind == "mlp" else 3 * self.size * self.size

    def input_array(self, payload: bytes) -> np.ndarray:
        x = featurize(payload, self.input_dim)
        return x if self.kind == "mlp" else x.reshape(3, self.size, self.size)


def build_torch(shape: SyntheticShape):
    """A seeded random-weight model: the same shape and seed give the same weights everywhere."""
    import torch
    from torch import nn

    gen = torch.Generator().manual_seed(shape.seed)
    if shape.kind == "mlp":
        layers: list[nn.Module] = []
        for _ in range(shape.depth):
            layers += [nn.Linear(shape.width, shape.width), nn.ReLU()]
        layers.append(nn.Linear(shape.width, shape.classes))
    else:
        layers = [nn.Conv2d(3, shape.width, 3, padding=1), nn.ReLU()]
        for _ in range(shape.depth - 1):
            layers += [nn.Conv2d(shape.width, shape.width, 3, padding=1), nn.ReLU()]
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(shape.width, shape.classes)]
    model = nn.Sequential(*layers)
    with torch.no_grad():
        for p in model.parameters():
            # Scaled so activations neither vanish nor explode through deep stacks.
            fan_in = p.shape[1] * (p[0, 0].numel() if p.dim() == 4 else 1) if p.dim() > 1 else 1
            p.copy_(torch.randn(p.shape, generator=gen) * (2.0 / fan_in) ** 0.5 if p.dim() > 1
                    else torch.zeros(p.shape))
    return model.eval()


class SyntheticCodec:
    """Base: any payload -> featurized input; subclasses decide what an item emits."""

    def __init__(self, shape: SyntheticShape) -> None:
        self.shape = shape

    def decode(self, payload: bytes) -> np.ndarray:
        return self.shape.input_array(payload)

    def collate(self, items: list[np.ndarray]) -> dict[str, np.ndarray]:
        return {INPUT_NAME: np.ascontiguousarray(np.stack(items))}

    def encode(self, row: np.ndarray, payload: bytes) -> ItemOutput:
        return ItemOutput((Emit(top_k_json(row), JSON_TYPE),))

    def example_payload(self) -> bytes:
        return np.random.default_rng(self.shape.seed).integers(
            0, 256, size=min(self.shape.input_dim, 4096), dtype=np.uint8).tobytes()


class DetectorCodec(SyntheticCodec):
    """Fan-out: k ~ Poisson(mean_detections) items per input, k drawn from the payload hash (capped
    at ``max_detections``). Each detection emits a crop: a contiguous slice of the input payload
    (the whole payload when it is shorter than k bytes), tagged with its index so crops differ."""

    def __init__(self, shape: SyntheticShape, mean_detections: float, max_detections: int,
                 content_type: str = "application/octet-stream") -> None:
        super().__init__(shape)
        if not 0 <= mean_detections <= 1000:
            raise ValueError(f"detector: params.mean_detections must be in [0, 1000], got {mean_detections!r}")
        if max_detections < 0:
            raise ValueError(f"detector: params.max_detections must be >= 0, got {max_detections!r}")
        self.mean = float(mean_detections)
        self.max = int(max_detections)
        self.content_type = content_type

    def detections(self, payload: bytes) -> int:
        rng = np.random.default_rng(payload_seed(payload, b"detect"))
        return int(min(rng.poisson(self.mean), self.max))

    def encode(self, row: np.ndarray, payload: bytes) -> ItemOutput:
        k = self.detections(payload)
        bounds = np.linspace(0, len(payload), k + 1).astype(int) if len(payload) >= k else None
        emits = []
        for i in range(k):
            crop = payload if bounds is None else payload[bounds[i]:bounds[i + 1]]
            emits.append(Emit(crop + i.to_bytes(2, "little"), self.content_type))
        return ItemOutput(tuple(emits))


class LanguageIdCodec(SyntheticCodec):
    """Conditional routing: each item goes to exactly one child stage, by a label drawn from the
    payload hash with the configured probabilities; the emitted payload is the input unchanged."""

    def __init__(self, shape: SyntheticShape, branches: dict[str, str], probabilities: dict[str, float],
                 content_type: str = "text/plain; charset=utf-8") -> None:
        super().__init__(shape)
        if not branches:
            raise ValueError("language-id: params.branches must map at least one label to a stage")
        if set(branches) != set(probabilities):
            raise ValueError(f"language-id: labels of params.branches {sorted(branches)} and of the "
                             f"probabilities {sorted(probabilities)} differ")
        total = sum(probabilities.values())
        if any(p < 0 for p in probabilities.values()) or abs(total - 1.0) > 1e-6:
            raise ValueError(f"language-id: probabilities must be >= 0 and sum to 1, got {probabilities}")
        self.labels = tuple(sorted(branches))
        self.branches = dict(branches)
        self.cumulative = np.cumsum([probabilities[label] for label in self.labels])
        self.content_type = content_type

    def label(self, payload: bytes) -> str:
        u = payload_unit(payload, b"language-id")
        i = int(np.searchsorted(self.cumulative, u, side="right"))
        return self.labels[min(i, len(self.labels) - 1)]

    def encode(self, row: np.ndarray, payload: bytes) -> ItemOutput:
        return ItemOutput((Emit(payload, self.content_type, to=self.branches[self.label(payload)]),))

    def example_payload(self) -> bytes:
        return "Le renard brun saute par-dessus le chien paresseux.".encode()


class TranslateCodec(SyntheticCodec):
    """A stand-in translator: runs the model, emits JSON with the source text and the model's
    output as a deterministic token sequence (argsort of the logits)."""

    def encode(self, row: np.ndarray, payload: bytes) -> ItemOutput:
        text = payload.decode("utf-8", errors="replace")
        tokens = [int(i) for i in np.argsort(-row, kind="stable")[: min(8, row.size)]]
        return ItemOutput((Emit(json.dumps({"source": text, "tokens": tokens}).encode(), JSON_TYPE),))

    def example_payload(self) -> bytes:
        return "Le renard brun saute par-dessus le chien paresseux.".encode()
