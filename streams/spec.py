"""The pipeline spec: a YAML file loaded once into frozen dataclasses and validated at the edge.

Format (every field is checked, unknown keys are errors with a "did you mean"; an error names the file,
the field path and what was expected; the JSON Schema: ``slipstream validate --schema``)::

    name: image-classify          # [a-z0-9-], used in topic names
    slo_ms: 400                   # end-to-end latency SLO; deadline = created + slo
    input_content_type: image/raw # what clients put in InferenceRequest.payload
    hardware:                     # the catalog: name -> kind (cpu|cuda), threads, price,
      cpu-1: {kind: cpu, threads: 1, cost_per_hour: 0.05}   # memory_gib (default 2: a pod's memory)
    stages:
      - name: classify
        variants:                 # model variants this stage may run
          - {name: lite0, model: efficientnet-lite0, accuracy: 0.753, params: {}}
        defaults: {variant: lite0, hardware: cpu-1, max_batch: 4, batch_timeout_ms: 5,
                   replicas: 1, partitions: 4}
    edges:                        # DAG; no edges = a one-stage pipeline
      - {from: detect, to: classify, fanout: 2.0, probability: 1.0}

The source is the one stage with no incoming edge, the sinks are stages with no outgoing edge.
``fanout`` is the mean number of child items per input item and ``probability`` the chance an item
takes this edge (a conditional branch); the planner uses both, the data plane follows what the
variant's output actually says (see ``slipstream.agents.routing``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping, Optional

from pydantic import ConfigDict, Field, StringConstraints

from ..schemas.records import StageConfig
from .docmodel import Doc, did_you_mean, load_document, read
from .graph import StageGraph, reference_error
from .limits import MAX_REQUEST_BYTES

DEFAULTS_MODE = "defaults"  # the planner_mode of a stage's spec defaults: no planner chose them
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


class SpecError(ValueError):
    """A pipeline spec that does not validate; the message names file, field and expectation."""


@dataclass(frozen=True)
class Hardware:
    name: str
    kind: str  # cpu | cuda
    cost_per_hour: float
    threads: int = 1
    memory_gib: float = 2.0  # what a replica may use (Kubernetes requests and limits)


@dataclass(frozen=True)
class Variant:
    name: str
    model: str  # key into the model zoo (slipstream.agents.zoo)
    accuracy: float
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Stage:
    name: str
    variants: tuple[Variant, ...]
    defaults: StageConfig  # the config in force before any control record (epoch -1)

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(f"stage {self.name!r} has no variant {name!r}")


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    fanout: float = 1.0
    probability: float = 1.0


@dataclass(frozen=True)
class Pipeline(StageGraph):
    name: str
    slo_ms: float
    hardware: Mapping[str, Hardware]
    stages: tuple[Stage, ...]
    edges: tuple[Edge, ...] = ()
    input_content_type: str = "application/octet-stream"
    source_file: str = "<memory>"
    max_message_bytes: int | None = None  # every topic's max.message.bytes (None: the broker's)

    @property
    def needs_join(self) -> bool:
        """Whether requests can split into fragments that a join worker must put back together:
        fan-out edges, or several sinks."""
        return any(e.fanout != 1 for e in self.edges) or len(self.sinks) > 1

    def worker_roles(self, replicas: Mapping[str, int]) -> dict[str, int]:
        """Processes to run: the stages' replicas, plus one join worker when the pipeline needs it."""
        return {**replicas, **({"join": 1} if self.needs_join else {})}


# ----------------------------------------------------------------------------------------------
# The document: what a spec file may say (also the JSON Schema editors read)

Name = Annotated[str, StringConstraints(pattern=NAME_RE.pattern)]


class HardwareDoc(Doc):
    kind: Literal["cpu", "cuda"]
    cost_per_hour: float = Field(ge=0, description="price of one replica on it, $/h")
    threads: int = Field(1, ge=1, description="cores (CPU) one replica uses")
    memory_gib: float = Field(2.0, ge=0.125, description="memory of a replica (Kubernetes requests/limits)")


class VariantDoc(Doc):
    name: Name
    model: str = Field(min_length=1, description="a model of the zoo (docs/models.md) or of a plugin")
    accuracy: float = Field(ge=0, le=1)
    params: dict[str, Any] = Field(default_factory=dict, description="the model's params (docs/models.md)")


class DefaultsDoc(Doc):
    variant: Optional[str] = Field(None, description="default: the first variant")
    hardware: Optional[str] = Field(None, description="default: the first hardware type")
    max_batch: int = Field(1, ge=1, le=4096)
    batch_timeout_ms: float = Field(5.0, ge=0, le=60_000)
    replicas: int = Field(1, ge=1, le=1024)
    partitions: int = Field(4, ge=1, le=4096)


class StageDoc(Doc):
    name: Name
    variants: list[VariantDoc] = Field(min_length=1)
    defaults: DefaultsDoc = Field(default_factory=DefaultsDoc)


class EdgeDoc(Doc):
    src: Name = Field(alias="from")
    dst: Name = Field(alias="to")
    fanout: float = Field(1.0, ge=0, description="mean child items per input item")
    probability: float = Field(1.0, ge=0, le=1, description="chance an item takes this edge")


class PipelineDoc(Doc):
    """A Slipstream pipeline spec (docs/pipelines.md)."""

    model_config = ConfigDict(title="Slipstream pipeline spec")
    name: Name
    slo_ms: float = Field(ge=1, description="end-to-end latency SLO in ms")
    input_content_type: str = "application/octet-stream"
    max_message_bytes: Optional[int] = Field(
        None, ge=64 * 1024, le=MAX_REQUEST_BYTES,
        description="the largest record the pipeline's topics take, in bytes (Kafka's max.message.bytes; "
                    "default: the broker's, 1 MiB); a larger request is refused (the gateway answers 413)")
    hardware: dict[Name, HardwareDoc] = Field(min_length=1)
    stages: list[StageDoc] = Field(min_length=1)
    edges: Optional[list[EdgeDoc]] = None


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a spec file (``slipstream validate --schema``)."""
    return PipelineDoc.model_json_schema(by_alias=True)


# ----------------------------------------------------------------------------------------------
# Loading and validation


def load_pipeline(path: str | Path) -> Pipeline:
    """Load and validate a pipeline spec file."""
    doc = load_document(path, "pipeline spec", SpecError, fmt="yaml")
    return parse_pipeline(doc, source_file=str(Path(path)))


def parse_pipeline(doc: Any, *, source_file: str = "<memory>") -> Pipeline:
    """Validate a parsed spec document (types, bounds, unknown keys, then the cross-references)."""
    d = read(PipelineDoc, doc, source_file, SpecError)

    def fail(path: str, expected: str, got: Any) -> SpecError:
        return SpecError(f"{source_file}: {path}: expected {expected}, got {got!r}")

    hardware = {n: Hardware(name=n, **h.model_dump()) for n, h in d.hardware.items()}
    stages = [_stage(d.name, s, f"stages[{i}]", hardware, fail) for i, s in enumerate(d.stages)]
    if (wrong := reference_error([s.name for s in stages], d.edges or ())) is not None:
        raise fail(*wrong)
    edges = [Edge(src=e.src, dst=e.dst, fanout=e.fanout, probability=e.probability) for e in d.edges or ()]
    pipe = Pipeline(name=d.name, slo_ms=d.slo_ms, hardware=hardware, stages=tuple(stages),
                    edges=tuple(edges), input_content_type=d.input_content_type, source_file=source_file,
                    max_message_bytes=d.max_message_bytes)
    if (wrong := pipe.shape_error()) is not None:
        raise fail("edges", *wrong)
    return pipe


def _stage(pipeline: str, s: StageDoc, path: str, hardware: Mapping[str, Hardware], fail) -> Stage:
    vnames = [v.name for v in s.variants]
    if len(set(vnames)) != len(vnames):
        raise fail(f"{path}.variants", "unique variant names", vnames)
    d, dpath = s.defaults, f"{path}.defaults"
    variant = vnames[0] if d.variant is None else d.variant
    if variant not in vnames:
        raise fail(f"{dpath}.variant", f"one of {vnames}{did_you_mean(variant, vnames)}", variant)
    hw = next(iter(hardware)) if d.hardware is None else d.hardware
    if hw not in hardware:
        raise fail(f"{dpath}.hardware", f"one of {sorted(hardware)}{did_you_mean(hw, hardware)}", hw)
    if d.replicas > d.partitions:
        raise fail(f"{dpath}.replicas", f"at most partitions ({d.partitions}): replicas beyond the "
                   "partition count sit idle", d.replicas)
    defaults = StageConfig(pipeline=pipeline, stage=s.name, variant=variant, hardware=hw, max_batch=d.max_batch,
                           batch_timeout_ms=float(d.batch_timeout_ms), replicas=d.replicas, partitions=d.partitions,
                           epoch=-1, planner_mode=DEFAULTS_MODE, reason="the spec's defaults")
    variants = tuple(Variant(name=v.name, model=v.model, accuracy=v.accuracy, params=dict(v.params))
                     for v in s.variants)
    return Stage(name=s.name, variants=variants, defaults=defaults)
