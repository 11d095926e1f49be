"""Executors: run one batch of payloads through a model on the hardware a stage was given.

An executor is a *codec* (payload bytes -> model input, model output -> ``Emit`` items) around a
*backend* (onnxruntime or torch) or, for model-free stages (noop, resize, tokenise), a per-item
function. Everything here implements ``slipstream.streams.executor.Executor``; ``slipstream.agents.zoo`` picks the parts
from a pipeline ``Variant`` and ``Hardware``.

Devices are checked, not assumed: onnxruntime silently falls back to the CPU when the CUDA provider
cannot load (missing CUDA/cuDNN), so the backend reads ``session.get_providers()`` after creating
the session, sets ``device`` from what it actually got, and logs a warning on a fallback.

Every executor carries ``digest``, the short sha256 of what it runs: the ONNX file, or a torch module's
weights ("" for a model-free stage), so configs, hop timings and metrics can name the model version.
A pin (``params.digest`` of a spec variant, ``StageConfig.digests``) names the digest a variant must
load; :func:`check_digest` refuses any other model (:class:`DigestMismatch`) rather than serve it.

Threads: ``Hardware.threads`` becomes onnxruntime's ``intra_op_num_threads`` (``inter_op`` stays 1:
one batch at a time). Its pool's threads do not spin waiting for the next batch
(``session.intra_op.allow_spinning`` 0): a worker shares the host's cores with the other stages'
workers and the broker, and spinning threads take those cores from them between batches. torch has
only a process-wide setting (``torch.set_num_threads``), so a torch backend sets it for the whole
worker process. A worker process holds k replicas of its stage
(``slipstream.agents.replicas``), each running on its own thread; they all run on the stage's one
hardware, so each sets the same number.
"""
from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np

from ..streams.executor import Emit, ItemOutput
from ..streams.spec import Hardware
from .preprocess import BatchBuffer

log = logging.getLogger(__name__)

CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"


# ----------------------------------------------------------------------------------------------
# Device selection: pure functions, tested with fake provider lists.


@dataclass(frozen=True)
class ProviderChoice:
    providers: tuple[str, ...]  # what to ask onnxruntime for, in preference order
    wanted_device: str  # "cuda:0" or "cpu"
    reason: str = ""  # why we did not get what Hardware.kind asked for ("" when we did)


def select_providers(kind: str, available: Sequence[str], device_index: int = 0) -> ProviderChoice:
    """Which onnxruntime execution providers to request for a hardware kind, given
    ``ort.get_available_providers()``. CPU is always last, as the fallback."""
    if kind == "cpu":
        return ProviderChoice((CPU_PROVIDER,), "cpu")
    if kind == "cuda":
        if CUDA_PROVIDER in available:
            return ProviderChoice((CUDA_PROVIDER, CPU_PROVIDER), f"cuda:{device_index}")
        return ProviderChoice((CPU_PROVIDER,), "cpu",
                              f"hardware kind 'cuda' asked for {CUDA_PROVIDER}, but this onnxruntime "
                              f"build offers only {list(available)} (install onnxruntime-gpu)")
    raise ValueError(f"unknown hardware kind {kind!r}: expected 'cpu' or 'cuda'")


def device_from_providers(session_providers: Sequence[str], device_index: int = 0) -> str:
    """The device a created session really runs on: its first provider."""
    if session_providers and session_providers[0] == CUDA_PROVIDER:
        return f"cuda:{device_index}"
    return "cpu"


def select_torch_device(kind: str, cuda_available: bool, device_index: int = 0) -> tuple[str, str]:
    """(device, fallback reason) for a torch backend."""
    if kind == "cpu":
        return "cpu", ""
    if kind == "cuda":
        if cuda_available:
            return f"cuda:{device_index}", ""
        return "cpu", "hardware kind 'cuda' asked for a GPU, but torch.cuda.is_available() is False"
    raise ValueError(f"unknown hardware kind {kind!r}: expected 'cpu' or 'cuda'")


# ----------------------------------------------------------------------------------------------
# Backends: a batch in (numpy arrays), a numpy array out.


def file_digest(path: str | Path, length: int = 12) -> str:
    """The first ``length`` hex digits of a file's sha256."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:length]


def module_digest(module: Any, length: int = 12) -> str:
    """The first ``length`` hex digits of the sha256 of a torch module's weights (names and values)."""
    h = hashlib.sha256()
    for name, tensor in module.state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:length]


class DigestMismatch(ValueError):
    """The model a variant loaded is not the one pinned."""


def is_sha256(text: str) -> bool:
    """Whether ``text`` is a full sha256 (64 hex digits): what a model fetched by URI must pin."""
    return len(text) == 64 and all(c in "0123456789abcdefABCDEF" for c in text)


def digest_matches(digest: str, pin: str) -> bool:
    """Whether a model of ``digest`` satisfies ``pin`` (its 12 hex digits, or the full sha256 they
    start); an empty pin pins nothing."""
    return not pin or bool(digest and pin.lower().startswith(digest))


def check_digest(ex: Any, pin: str, source: str) -> None:
    """Raise :class:`DigestMismatch` unless ``ex.digest`` matches ``pin`` (its 12 hex digits, or the
    full sha256 they start); an empty pin pins nothing."""
    if not digest_matches(ex.digest, pin):
        raise DigestMismatch(f"variant {ex.variant!r} loaded model digest {ex.digest or '(none)'!r}, "
                             f"but {source} pins {pin!r}: refusing to serve another model")


Factory = Callable[[Any, Hardware], Any]  # (Variant, Hardware) -> executor


def pinned(factory: Factory, digests: Mapping[str, str]) -> Factory:
    """``factory`` that refuses (closes, then raises :class:`DigestMismatch`) a variant whose loaded
    model differs from its pin in ``digests`` (a StageConfig's)."""
    if not digests:
        return factory

    def load(variant: Any, hardware: Hardware) -> Any:
        ex = factory(variant, hardware)
        try:
            check_digest(ex, digests.get(variant.name, ""), "the StageConfig")
        except DigestMismatch:
            ex.close()
            raise
        return ex
    return load


class Backend(Protocol):
    device: str
    digest: str

    def __call__(self, inputs: dict[str, np.ndarray]) -> np.ndarray: ...

    def close(self) -> None: ...


class OrtBackend:
    """An onnxruntime session with the providers and threads ``Hardware`` asks for."""

    def __init__(self, onnx_path: str | Path, hardware: Hardware, *, device_index: int = 0,
                 available: Sequence[str] | None = None, io_binding: bool | None = None) -> None:
        import onnxruntime as ort

        choice = select_providers(hardware.kind, ort.get_available_providers()
                                  if available is None else available, device_index)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = hardware.threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")  # see the module docstring
        provider_options = [{"device_id": device_index} if p == CUDA_PROVIDER else {}
                            for p in choice.providers]
        self.session = ort.InferenceSession(str(onnx_path), opts, providers=list(choice.providers),
                                            provider_options=provider_options)
        self.providers = tuple(self.session.get_providers())
        self.device = device_from_providers(self.providers, device_index)
        if self.device != choice.wanted_device or choice.reason:
            log.warning("onnxruntime runs %s on %s, not what hardware %r (kind %s) asked for: %s",
                        Path(onnx_path).name, self.device, hardware.name, hardware.kind,
                        choice.reason or f"session providers are {list(self.providers)} "
                        "(CUDA provider failed to load; check CUDA/cuDNN libraries)")
        self.input_names = tuple(i.name for i in self.session.get_inputs())
        self.output_name = self.session.get_outputs()[0].name  # the onnx kind may pick another
        self.digest = file_digest(onnx_path)
        # I/O binding: on by default on a GPU (see IoBound), off on the CPU where run() copies nothing
        use = self.device != "cpu" if io_binding is None else io_binding
        self.bound = IoBound(self.session, self.output_name, self.device) if use else None

    def __call__(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        if self.bound is not None:
            return self.bound(inputs)
        return self.session.run([self.output_name], inputs)[0]

    def close(self) -> None:
        self.session = None  # type: ignore[assignment]  # ort frees the session with the object


class IoBound:
    """onnxruntime I/O binding for one session: each input goes into an ``OrtValue`` on the session's
    device, allocated once per input shape and refilled in place (``update_inplace``: one host->device
    copy on CUDA, a memcpy on the CPU), the output is allocated by onnxruntime on the device, and only
    the output is copied back. Without it, ``session.run`` on CUDA allocates device memory for every
    input of every batch. Designed for CUDA; tested on the CPU execution provider, which supports the
    same calls."""

    def __init__(self, session: Any, output_name: str, device: str) -> None:
        import onnxruntime as ort

        self.session, self.output_name = session, output_name
        kind, _, index = device.partition(":")
        self.device_type, self.device_id = kind, int(index or 0)
        self._ort = ort
        self.binding = session.io_binding()
        # (name, shape, dtype) -> OrtValue, the most recently used last; at most KEEP shapes stay
        # allocated (a busy stage runs its max batch again and again; device memory stays bounded)
        self.values: OrderedDict[tuple[str, tuple[int, ...], str], Any] = OrderedDict()

    KEEP = 4

    def _value(self, name: str, arr: np.ndarray) -> Any:
        key = (name, arr.shape, arr.dtype.str)
        v = self.values.pop(key, None)
        if v is None:
            v = self._ort.OrtValue.ortvalue_from_shape_and_type(arr.shape, arr.dtype, self.device_type,
                                                                 self.device_id)
        self.values[key] = v
        while len(self.values) > self.KEEP:
            self.values.popitem(last=False)
        v.update_inplace(np.ascontiguousarray(arr))
        return v

    def __call__(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        b = self.binding
        for name, arr in inputs.items():
            b.bind_ortvalue_input(name, self._value(name, arr))
        b.bind_output(self.output_name, self.device_type, self.device_id)
        self.session.run_with_iobinding(b)
        out = b.copy_outputs_to_cpu()[0]
        b.clear_binding_inputs()
        b.clear_binding_outputs()
        return out


class TorchBackend:
    """A torch module in eval mode under ``torch.inference_mode()``. A single input array is passed
    positionally; several are passed as keyword arguments named like the codec's arrays."""

    def __init__(self, module: Any, hardware: Hardware, *, device_index: int = 0,
                 cuda_available: bool | None = None) -> None:
        import torch

        if cuda_available is None:
            cuda_available = torch.cuda.is_available()
        self.device, reason = select_torch_device(hardware.kind, cuda_available, device_index)
        if reason:
            log.warning("torch runs %s on %s for hardware %r: %s", type(module).__name__,
                        self.device, hardware.name, reason)
        # Process-wide (see module docstring): the same number for every replica of the worker.
        torch.set_num_threads(hardware.threads)
        self.module = module.eval().to(self.device)
        self.digest = module_digest(self.module)
        self._torch = torch

    def __call__(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        torch = self._torch
        with torch.inference_mode():
            tensors = {k: torch.from_numpy(v).to(self.device) for k, v in inputs.items()}
            out = (self.module(*tensors.values()) if len(tensors) == 1
                   else self.module(**tensors))
            return out.float().cpu().numpy()

    def close(self) -> None:
        self.module = None


# ----------------------------------------------------------------------------------------------
# Codecs and executors


class Codec(Protocol):
    """Turns payloads into model inputs and model outputs into emits, for one zoo entry."""

    def decode(self, payload: bytes) -> Any:
        """One item's model input; raises ValueError naming what is wrong with the payload."""
        ...

    def collate(self, items: list[Any]) -> dict[str, np.ndarray]:
        """Decoded items -> the backend's named input arrays (batch axis first)."""
        ...

    def encode(self, row: np.ndarray, payload: bytes) -> ItemOutput:
        """One row of the model output (and the item's own payload) -> what the item emits."""
        ...

    def example_payload(self) -> bytes: ...


def check_with(decode: Callable[[bytes], Any], payload: bytes) -> str | None:
    """Per-item validation: the reason ``decode`` rejects a payload, or None if it is valid."""
    return decoded(decode, payload)[1]


def decoded(decode: Callable[[bytes], Any], payload: bytes) -> tuple[Any, str | None]:
    """(``decode(payload)``, None), or (None, the reason it rejects the payload: its ValueError)."""
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        return None, f"payload must be bytes, got {type(payload).__name__}"
    try:
        return decode(bytes(payload)), None
    except ValueError as exc:
        return None, str(exc)


class ModelExecutor:
    """Codec + backend. ``run`` decodes every item first, so a bad payload raises ValueError before
    the model runs; the agents call ``run_checked``, which decodes each item once and keeps the bad
    ones out of the batch with their reasons (``check`` is that decode alone)."""

    def __init__(self, variant: str, codec: Codec, backend: Backend) -> None:
        self.variant = variant
        self.codec = codec
        self.backend = backend
        self.device = backend.device
        self.digest = backend.digest
        # codecs that write each item into its row of a reused batch (``decode_into``) skip the
        # per-item arrays and the stacking copy of ``collate``
        spec = getattr(codec, "batch_input", None) if hasattr(codec, "decode_into") else None
        self._input_name, self._buffer = (spec[0], BatchBuffer(spec[1])) if spec else (None, None)

    def check(self, payload: bytes) -> str | None:
        return check_with(self.codec.decode, payload)

    def run(self, payloads: Sequence[bytes]) -> list[ItemOutput]:
        if not payloads:
            return []
        return self._outputs(self.backend(self.assemble(payloads)), payloads)

    def run_checked(self, payloads: Sequence[bytes]) -> tuple[list[str | None], list[ItemOutput]]:
        """Each payload decoded once, as :meth:`check` would, straight into the batch: (the reason
        each payload is refused, None for the good ones; the model's outputs for the good ones, in
        order). Raises on a model error."""
        rows = self._buffer.rows(len(payloads)) if self._buffer is not None else None
        reasons, good, items = [], [], []  # items: the decoded arrays (collate's; None into rows)
        for p in payloads:  # into rows: a failed decode leaves its row to the next payload
            decode = self.codec.decode if rows is None else (lambda b: self.codec.decode_into(b, rows[len(good)]))
            item, why = decoded(decode, p)
            reasons.append(why)
            if why is None:
                good.append(p)
                items.append(item)
        if not good:
            return reasons, []
        x = self.codec.collate(items) if rows is None else {self._input_name: rows[:len(good)]}
        return reasons, self._outputs(self.backend(x), good)

    def _outputs(self, out: Sequence[np.ndarray], payloads: Sequence[bytes]) -> list[ItemOutput]:
        if len(out) != len(payloads):
            raise RuntimeError(f"{self.variant}: model returned {len(out)} rows for "
                               f"{len(payloads)} inputs")
        return [self.codec.encode(row, bytes(p)) for row, p in zip(out, payloads)]

    def assemble(self, payloads: Sequence[bytes]) -> dict[str, np.ndarray]:
        """The backend's input for a batch: written row by row into the reused buffer when the codec
        can, else decoded item by item and collated. Raises ValueError on a bad payload."""
        if self._buffer is not None:
            x = self._buffer.rows(len(payloads))
            for row, p in zip(x, payloads):
                self.codec.decode_into(p, row)
            return {self._input_name: x}
        return self.codec.collate([self.codec.decode(bytes(p)) for p in payloads])

    def example_payload(self) -> bytes:
        return self.codec.example_payload()

    def close(self) -> None:
        self.backend.close()


class FunctionExecutor:
    """A model-free stage (noop, image-resize, tokenize): a pure per-item function on the CPU.
    ``validate`` (default: the function) is ``check``'s, the function's own first step (decoding the
    payload); the function raises the same ValueError on a payload ``validate`` refuses."""

    device = "cpu"
    digest = ""  # no model

    def __init__(self, variant: str, fn: Callable[[bytes], Emit], example: Callable[[], bytes],
                 validate: Callable[[bytes], Any] | None = None) -> None:
        self.variant = variant
        self._fn = fn
        self._example = example
        self._validate = validate or fn

    def check(self, payload: bytes) -> str | None:
        return check_with(self._validate, payload)

    def run(self, payloads: Sequence[bytes]) -> list[ItemOutput]:
        return [ItemOutput((self._fn(bytes(p)),)) for p in payloads]

    def run_checked(self, payloads: Sequence[bytes]) -> tuple[list[str | None], list[ItemOutput]]:
        """The function once per payload, its ValueError the payload's reason (see
        ``ModelExecutor.run_checked``): an image is decoded once, not by ``check`` and again by ``run``."""
        outs = [decoded(self._fn, p) for p in payloads]
        return [why for _, why in outs], [ItemOutput((out,)) for out, why in outs if why is None]

    def example_payload(self) -> bytes:
        return self._example()

    def close(self) -> None:
        pass
