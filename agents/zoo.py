"""The model zoo: what a pipeline ``Variant.model`` may name, and how to build its executor.

``ZOO`` holds each entry's metadata (input/output content types, published accuracy where there is
one, the params it takes with their defaults); ``load_executor(variant, hardware, cache_dir=...)``
validates ``variant.params`` against it and builds the executor on the hardware asked for.

Synthetic entries have no accuracy of their own (``accuracy=None``): the pipeline spec's
``Variant.accuracy`` is the only number the planner sees for them. For the real models the spec
should carry the published number listed here (see docs/models.md).

Beyond the zoo: ``model: onnx`` serves your own ONNX file (``slipstream.agents.models.onnx_file``), and a
third-party package registers more model kinds as Python entry points in the group
``slipstream.executors``: the entry point's name is the ``model:`` it serves, its object a loader
``(variant, hardware, params, cache_dir) -> Executor`` given the variant's params as written (it
validates them itself). A built-in name cannot be taken by a plugin.

Every executor carries ``digest`` (the short sha256 of its ONNX file or weights). ``params.digest``,
accepted by every kind (plugins too, which never see it), pins it: a variant whose model has another
digest is not loaded (``slipstream.agents.executors.DigestMismatch``).

The model cache directory is a parameter: only the CLI reads ``SLIPSTREAM_CACHE``.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from ..streams.docmodel import did_you_mean
from ..streams.executor import Emit, Executor
from ..streams.spec import Hardware, Variant
from .executors import (DigestMismatch, FunctionExecutor, ModelExecutor, OrtBackend, TorchBackend,
                             check_digest)
from .models import efficientnet, minilm, onnx_file, synthetic
from .models.export import DEFAULT_CACHE_DIR, cache_key, cached_onnx, torch_zeros
from .preprocess import (RAW_IMAGE_TYPE, TEXT_TYPE, TOKEN_IDS_TYPE, ImageResize, Tokenize,
                               decode_image, decode_text)

IMAGE_TYPES = "image/png | image/jpeg | image/x-raw-uint8;shape=S,S,3"
ANY_TYPE = "*/*"
PLUGIN_GROUP = "slipstream.executors"
SYNTHETIC_PARAMS = {"kind": "mlp", "width": 256, "depth": 4, "size": 32, "classes": 10, "seed": 0,
                    "backend": "torch"}


@dataclass(frozen=True)
class ZooEntry:
    name: str
    description: str
    input_content_type: str
    output_content_type: str
    accuracy: float | None  # published top-1 / benchmark score; None = take it from the spec
    params: Mapping[str, Any] = field(default_factory=dict)  # accepted params and their defaults
    output: str = ""  # what the output payload holds


ZOO: dict[str, ZooEntry] = {
    **{name: ZooEntry(
        name, f"EfficientNet-Lite{name[-1]} ImageNet classifier, {spec.resolution}x{spec.resolution}",
        IMAGE_TYPES, efficientnet.JSON_TYPE, spec.top1, {"backend": "onnx"},
        'JSON {"top5": [[class_index, prob], ...]}') for name, spec in efficientnet.LITE.items()},
    "all-minilm-l6-v2": ZooEntry(
        "all-minilm-l6-v2", "sentence-transformers all-MiniLM-L6-v2 sentence embedding",
        f"{TEXT_TYPE} (params.input=text) | {TOKEN_IDS_TYPE} (params.input=tokens)",
        minilm.VECTOR_TYPE, minilm.ACCURACY, {"input": "text", "backend": "torch"},
        f"{minilm.DIM} float32 little-endian, L2-normalised"),
    "synthetic": ZooEntry(
        "synthetic", "seeded random-weight MLP/CNN classifier of configurable cost", ANY_TYPE,
        efficientnet.JSON_TYPE, None, SYNTHETIC_PARAMS, 'JSON {"top5": [[class_index, prob], ...]}'),
    "detector": ZooEntry(
        "detector", "synthetic detector: fans out k ~ Poisson(mean_detections) crops per input",
        ANY_TYPE, "application/octet-stream", None,
        {**SYNTHETIC_PARAMS, "mean_detections": 2.0, "max_detections": 32},
        "k crops (slices of the input), k from the payload hash"),
    "language-id": ZooEntry(
        "language-id", "synthetic language identifier: routes each item to one child stage",
        ANY_TYPE, TEXT_TYPE, None,
        {**SYNTHETIC_PARAMS, "branches": {}, "p_other": None, "probabilities": None},
        "the input unchanged, Emit.to = params.branches[label]"),
    "translate": ZooEntry(
        "translate", "synthetic translator", ANY_TYPE, efficientnet.JSON_TYPE, None,
        SYNTHETIC_PARAMS, 'JSON {"source": text, "tokens": [...]}'),
    "noop": ZooEntry("noop", "returns its input (for relay benchmarks); a payload starting with "
                     "params.hang_on holds its run for params.hang_s (a hung model, for liveness tests)",
                     ANY_TYPE, "same as input", None,
                     {"content_type": "application/octet-stream", "hang_on": "", "hang_s": 0.0}, "the input bytes"),
    "image-resize": ZooEntry(
        "image-resize", "decode any image, resize to params.size", IMAGE_TYPES,
        f"{RAW_IMAGE_TYPE};shape=S,S,3", None, {"size": 224}, "raw RGB pixels"),
    "tokenize": ZooEntry(
        "tokenize", "WordPiece tokeniser of all-MiniLM-L6-v2", TEXT_TYPE, TOKEN_IDS_TYPE, None,
        {"max_length": minilm.MAX_TOKENS}, "int32 little-endian ids with [CLS]/[SEP]"),
    "onnx": ZooEntry(
        "onnx", "your own ONNX file (params.path), on onnxruntime",
        " | ".join(onnx_file.CONTENT_TYPES) + " (params.content_type)",
        f"{onnx_file.NPY_TYPE} | {efficientnet.JSON_TYPE} (params.emit)", None, onnx_file.PARAMS,
        "the item's output row as .npy, or its softmax top-5 JSON"),
}


def entry(model: str) -> ZooEntry:
    try:
        return ZOO[model]
    except KeyError:
        raise ValueError(f"unknown model {model!r}: the zoo has {sorted(ZOO)}, plugins (entry points "
                         f"{PLUGIN_GROUP!r}) have {sorted(plugins())}") from None


def plugins() -> dict[str, importlib.metadata.EntryPoint]:
    """The model kinds installed packages register in the entry-point group ``slipstream.executors``."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=PLUGIN_GROUP)}


def _load_plugin(variant: Variant, hardware: Hardware, cache: Path) -> Executor | None:
    """The executor of a plugin's model kind, or None when no plugin serves ``variant.model``."""
    ep = plugins().get(variant.model)
    if ep is None:
        return None
    where = f"plugin {ep.value!r} (entry point {variant.model!r} in {PLUGIN_GROUP!r})"
    if variant.model in ZOO:
        raise ValueError(f"model {variant.model!r} is built in, yet {where} claims it: rename the "
                         f"entry point")
    ex = ep.load()(variant, hardware, dict(variant.params), cache)
    missing = [a for a in ("variant", "device", "digest", "run", "example_payload", "close")
               if not hasattr(ex, a)]
    if missing:
        raise TypeError(f"{where} returned {type(ex).__name__}, which lacks {missing} of the "
                        f"Executor protocol (slipstream.streams.executor)")
    return ex


def resolve_params(variant: Variant) -> dict[str, Any]:
    """The variant's params over the entry's defaults; an unknown key is an error naming it."""
    e = entry(variant.model)
    unknown = sorted(set(variant.params) - set(e.params))
    if unknown:
        raise ValueError(f"variant {variant.name!r} (model {variant.model!r}): unknown params "
                         f"{unknown}{did_you_mean(unknown[0], e.params)}; accepted: {sorted(e.params)}")
    return {**e.params, **dict(variant.params)}


def load_executor(variant: Variant, hardware: Hardware, *,
                  cache_dir: str | Path = DEFAULT_CACHE_DIR) -> Executor:
    """Build the executor of ``variant`` on ``hardware`` (a zoo entry, else an installed plugin);
    exported ONNX files are cached under cache_dir."""
    pin = variant.params.get("digest", "")
    if not isinstance(pin, str):
        raise ValueError(f"variant {variant.name!r}: params.digest must be a hex string (quote it in YAML), "
                         f"got {pin!r}")
    if "digest" in variant.params:
        variant = replace(variant, params={k: v for k, v in variant.params.items() if k != "digest"})
    cache = Path(cache_dir).expanduser()
    ex = _load_plugin(variant, hardware, cache)
    if ex is None:
        params = resolve_params(variant)
        ex = _LOADERS[variant.model](variant, hardware, params, cache)
    try:
        check_digest(ex, pin, "the spec (params.digest)")
    except DigestMismatch:
        ex.close()
        raise
    return ex


# ----------------------------------------------------------------------------------------------
# Loaders, one per entry kind


def _backend_name(params: Mapping[str, Any], allowed: tuple[str, ...], model: str) -> str:
    name = params["backend"]
    if name not in allowed:
        raise ValueError(f"model {model!r}: params.backend must be one of {list(allowed)}, got {name!r}")
    return name


def _load_efficientnet(variant: Variant, hw: Hardware, params: dict, cache: Path) -> Executor:
    spec = efficientnet.LITE[variant.model]
    codec = efficientnet.ImageClassifierCodec(spec.resolution)
    if _backend_name(params, ("onnx", "torch"), variant.model) == "torch":
        return ModelExecutor(variant.name, codec, TorchBackend(efficientnet.build_torch(spec), hw))
    path, _ = efficientnet_onnx(variant.model, cache)
    return ModelExecutor(variant.name, codec, OrtBackend(path, hw))


def efficientnet_onnx(model: str, cache_dir: str | Path) -> tuple[Path, bool]:
    """The cached ONNX file of an EfficientNet-Lite entry: (path, cache hit). torch is imported
    only to export on a miss."""
    spec = efficientnet.LITE[model]
    res = spec.resolution
    return cached_onnx(cache_dir, cache_key(model, *efficientnet.package_versions(spec)),
                       lambda: efficientnet.build_torch(spec), lambda: torch_zeros(1, 3, res, res))


def _load_minilm(variant: Variant, hw: Hardware, params: dict, cache: Path) -> Executor:
    _backend_name(params, ("torch",), variant.model)
    directory = minilm.model_dir()
    codec = minilm.TextEmbeddingCodec(Tokenize(directory / "tokenizer.json", minilm.MAX_TOKENS),
                                      params["input"])
    return ModelExecutor(variant.name, codec, TorchBackend(minilm.MeanPooledEncoder.build(directory), hw))


def _shape(params: Mapping[str, Any]) -> synthetic.SyntheticShape:
    return synthetic.SyntheticShape(**{k: params[k] for k in
                                       ("kind", "width", "depth", "size", "classes", "seed")})


def _synthetic_backend(variant: Variant, shape: synthetic.SyntheticShape, hw: Hardware,
                       params: Mapping[str, Any], cache: Path):
    if _backend_name(params, ("torch", "onnx"), variant.model) == "torch":
        return TorchBackend(synthetic.build_torch(shape), hw)

    digest = hashlib.sha256(json.dumps(shape.__dict__, sort_keys=True).encode()).hexdigest()[:12]
    lead = (shape.width,) if shape.kind == "mlp" else (3, shape.size, shape.size)
    path, _ = cached_onnx(cache, cache_key(f"synthetic-{shape.kind}-{digest}"),
                          lambda: synthetic.build_torch(shape), lambda: torch_zeros(1, *lead))
    return OrtBackend(path, hw)


def _language_probabilities(params: Mapping[str, Any]) -> dict[str, float]:
    branches, p_other, probs = params["branches"], params["p_other"], params["probabilities"]
    if not isinstance(branches, Mapping) or not all(isinstance(v, str) for v in branches.values()):
        raise ValueError(f"language-id: params.branches must map labels to stage names, got {branches!r}")
    if (p_other is None) == (probs is None):
        raise ValueError("language-id: give exactly one of params.p_other (two branches 'en' and "
                         "'other') or params.probabilities (label -> probability)")
    if probs is not None:
        if not isinstance(probs, Mapping):
            raise ValueError(f"language-id: params.probabilities must be a mapping, got {probs!r}")
        return {str(k): float(v) for k, v in probs.items()}
    if set(branches) != {"en", "other"}:
        raise ValueError(f"language-id: params.p_other needs branches 'en' and 'other', got {sorted(branches)}")
    if not isinstance(p_other, (int, float)) or not 0 <= p_other <= 1:
        raise ValueError(f"language-id: params.p_other must be in [0, 1], got {p_other!r}")
    return {"en": 1.0 - float(p_other), "other": float(p_other)}


def _load_synthetic(variant: Variant, hw: Hardware, params: dict, cache: Path) -> Executor:
    shape = _shape(params)
    codec: synthetic.SyntheticCodec
    if variant.model == "detector":
        codec = synthetic.DetectorCodec(shape, float(params["mean_detections"]),
                                        int(params["max_detections"]))
    elif variant.model == "language-id":
        codec = synthetic.LanguageIdCodec(shape, dict(params["branches"]),
                                          _language_probabilities(params))
    elif variant.model == "translate":
        codec = synthetic.TranslateCodec(shape)
    else:
        codec = synthetic.SyntheticCodec(shape)
    return ModelExecutor(variant.name, codec, _synthetic_backend(variant, shape, hw, params, cache))


def _load_noop(variant: Variant, hw: Hardware, params: dict, cache: Path) -> Executor:
    ctype, hang_on, hang_s = params["content_type"], params["hang_on"], params["hang_s"]
    if not isinstance(ctype, str) or not ctype:
        raise ValueError(f"noop: params.content_type must be a non-empty string, got {ctype!r}")
    if not isinstance(hang_on, str) or isinstance(hang_s, bool) or not isinstance(hang_s, (int, float)) \
            or not 0 <= hang_s <= 86400:
        raise ValueError(f"noop: params.hang_on must be a string and params.hang_s seconds in [0, 86400], "
                         f"got {hang_on!r} and {hang_s!r}")
    marker = hang_on.encode()

    def run(p: bytes) -> Emit:
        if marker and p.startswith(marker):
            time.sleep(hang_s)  # the hang itself: what a stuck model does to its thread
        return Emit(p, ctype)
    return FunctionExecutor(variant.name, run, lambda: b"slipstream-noop", validate=lambda p: None)


def _load_image_resize(variant: Variant, hw: Hardware, params: dict, cache: Path) -> Executor:
    resize = ImageResize(params["size"])
    return FunctionExecutor(variant.name, resize, resize.example, validate=decode_image)


def _load_tokenize(variant: Variant, hw: Hardware, params: dict, cache: Path) -> Executor:
    tok = Tokenize(minilm.model_dir() / "tokenizer.json", params["max_length"])
    return FunctionExecutor(variant.name, tok, tok.example, validate=decode_text)


def _load_onnx_file(variant: Variant, hw: Hardware, params: dict, cache: Path) -> Executor:
    path = onnx_file.model_path(params)
    try:
        backend = OrtBackend(path, hw)
    except Exception as exc:  # onnxruntime raises its own types (InvalidProtobuf, Fail, ...)
        raise ValueError(f"onnx: params.path {params['path']!r}: onnxruntime cannot load it: "
                         f"{type(exc).__name__}: {exc}") from None
    inputs = {i.name: i for i in backend.session.get_inputs()}
    name = onnx_file.pick(list(inputs), params["input"], "input")
    backend.output_name = onnx_file.pick([o.name for o in backend.session.get_outputs()],
                                         params["output"], "output")
    model_input = inputs[name]
    if model_input.type not in onnx_file.DTYPES:
        raise ValueError(f"onnx: the model input {name!r} is {model_input.type}; supported: "
                         f"{sorted(onnx_file.DTYPES)}")
    codec = onnx_file.OnnxFileCodec(
        name, onnx_file.item_shape(params["shape"], list(model_input.shape)),
        onnx_file.DTYPES[model_input.type], params["content_type"], params["emit"],
        onnx_file.channel_values(params["mean"], "mean"), onnx_file.channel_values(params["std"], "std"))
    return ModelExecutor(variant.name, codec, backend)


_LOADERS: dict[str, Callable[[Variant, Hardware, dict, Path], Executor]] = {
    **{name: _load_efficientnet for name in efficientnet.LITE},
    "all-minilm-l6-v2": _load_minilm,
    "synthetic": _load_synthetic,
    "detector": _load_synthetic,
    "language-id": _load_synthetic,
    "translate": _load_synthetic,
    "noop": _load_noop,
    "image-resize": _load_image_resize,
    "tokenize": _load_tokenize,
    "onnx": _load_onnx_file,
}
