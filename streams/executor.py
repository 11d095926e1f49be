"""The Executor protocol: what a stage runs on a batch. Implementations live in ``slipstream.agents.executors``
(onnxruntime, torch) and ``slipstream.agents.zoo`` builds them from a pipeline ``Variant``; the profiler in
``planner`` only sees this protocol, so the control plane never imports the data plane.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence


@dataclass(frozen=True)
class Emit:
    """One output item of one input item."""

    payload: bytes
    content_type: str
    to: str | None = None  # a child stage (conditional branch); None = every child


@dataclass(frozen=True)
class ItemOutput:
    """Everything one input produced: 1 emit for a chain, k for fan-out (k may be 0), and at a sink
    the emits become the result's output."""

    emits: tuple[Emit, ...]


class Executor(Protocol):
    variant: str  # the pipeline variant name it runs
    device: str  # what it actually runs on ("cpu", "cuda:0"): checked, not assumed
    digest: str  # short sha256 of the model it runs (ONNX file or weights); "" without a model

    def run(self, payloads: Sequence[bytes]) -> list[ItemOutput]:
        """Run one batch; one ItemOutput per payload, in order. Raises on a model error (the
        whole batch then ends as `error` results)."""
        ...

    def example_payload(self) -> bytes:
        """A valid input for this variant (for warm-up, profiling and the load generator)."""
        ...

    def close(self) -> None: ...

    # Optional: ``check(payload) -> str | None``, the reason a payload is refused (None: fine), and
    # ``run_checked(payloads) -> (reasons, outputs)``, ``check`` and ``run`` in one pass (each payload
    # decoded once; outputs for the payloads not refused). The agents call ``run_checked`` when an
    # executor has it, else ``check`` then ``run`` (``slipstream.agents.stage.serve.checked_run``).
