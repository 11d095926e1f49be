"""The pipeline spec: a YAML file loaded once into frozen dataclasses and validated at the edge.

Format (every field is checked; an error names the file, the field path and what was expected)::

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
        route: fanout             # optional: what the stage's output means for its children
    edges:                        # DAG; no edges = a one-stage pipeline
      - {from: detect, to: classify, fanout: 2.0, probability: 1.0}

The source is the one stage with no incoming edge, the sinks are stages with no outgoing edge.
``fanout`` is the mean number of child items per input item and ``probability`` the chance an item
takes this edge (a conditional branch); the planner uses both, the data plane follows what the
variant's output actually says (see ``agents.routing``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from streams.graph import StageGraph

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
HARDWARE_KINDS = ("cpu", "cuda")


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
    model: str  # key into the model zoo (agents.zoo)
    accuracy: float
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StageDefaults:
    variant: str
    hardware: str
    max_batch: int = 1
    batch_timeout_ms: float = 5.0
    replicas: int = 1
    partitions: int = 4


@dataclass(frozen=True)
class Stage:
    name: str
    variants: tuple[Variant, ...]
    defaults: StageDefaults

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

    @property
    def needs_join(self) -> bool:
        """Whether requests can split into fragments that a join worker must put back together:
        fan-out edges, or several sinks."""
        return any(e.fanout != 1 for e in self.edges) or len(self.sinks) > 1

    def worker_roles(self, replicas: Mapping[str, int]) -> dict[str, int]:
        """Processes to run: the stages' replicas, plus one join worker when the pipeline needs it."""
        return {**replicas, **({"join": 1} if self.needs_join else {})}


# ----------------------------------------------------------------------------------------------
# Loading and validation


class _Reader:
    """Reads typed fields out of nested YAML, naming the path of anything wrong."""

    def __init__(self, file: str) -> None:
        self.file = file

    def fail(self, path: str, expected: str, got: Any) -> SpecError:
        return SpecError(f"{self.file}: {path}: expected {expected}, got {got!r}")

    def mapping(self, obj: Any, path: str) -> Mapping[str, Any]:
        if not isinstance(obj, Mapping):
            raise self.fail(path, "a mapping", obj)
        return obj

    def seq(self, obj: Any, path: str) -> list:
        if not isinstance(obj, list):
            raise self.fail(path, "a list", obj)
        return obj

    def get(self, m: Mapping, key: str, path: str, default: Any = ...) -> Any:
        if key not in m:
            if default is ...:
                raise SpecError(f"{self.file}: {path}.{key}: required field is missing".replace(": .", ": "))
            return default
        return m[key]

    def name(self, m: Mapping, key: str, path: str) -> str:
        v = self.get(m, key, path)
        if not isinstance(v, str) or not NAME_RE.match(v):
            raise self.fail(f"{path}.{key}", "a name of lowercase letters, digits and '-'", v)
        return v

    def number(self, m: Mapping, key: str, path: str, *, lo: float, hi: float = float("inf"),
               default: Any = ..., integer: bool = False) -> Any:
        v = self.get(m, key, path, default)
        kind = "an integer" if integer else "a number"
        ok = isinstance(v, int) if integer else isinstance(v, (int, float))
        if isinstance(v, bool) or not ok or not (lo <= v <= hi):
            bounds = f" in [{lo}, {hi}]" if hi != float("inf") else f" >= {lo}"
            raise self.fail(f"{path}.{key}".lstrip("."), kind + bounds, v)
        return int(v) if integer else float(v)


def load_pipeline(path: str | Path) -> Pipeline:
    """Load and validate a pipeline spec file."""
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text())
    except FileNotFoundError:
        raise SpecError(f"{p}: no such pipeline spec file") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{p}: not valid YAML: {exc}") from None
    return parse_pipeline(doc, source_file=str(p))


def parse_pipeline(doc: Any, *, source_file: str = "<memory>") -> Pipeline:
    r = _Reader(source_file)
    top = r.mapping(doc, "(top level)")
    name = r.name(top, "name", "")
    slo_ms = r.number(top, "slo_ms", "", lo=1)
    ctype = r.get(top, "input_content_type", "", "application/octet-stream")
    if not isinstance(ctype, str):
        raise r.fail("input_content_type", "a string", ctype)

    hardware: dict[str, Hardware] = {}
    for hname, hdoc in r.mapping(r.get(top, "hardware", ""), "hardware").items():
        path = f"hardware.{hname}"
        if not isinstance(hname, str) or not NAME_RE.match(hname):
            raise r.fail(path, "a hardware name of lowercase letters, digits and '-'", hname)
        h = r.mapping(hdoc, path)
        kind = r.get(h, "kind", path)
        if kind not in HARDWARE_KINDS:
            raise r.fail(f"{path}.kind", " or ".join(HARDWARE_KINDS), kind)
        hardware[hname] = Hardware(
            name=hname, kind=kind,
            cost_per_hour=r.number(h, "cost_per_hour", path, lo=0),
            threads=r.number(h, "threads", path, lo=1, default=1, integer=True),
            memory_gib=r.number(h, "memory_gib", path, lo=0.125, default=2.0),
        )
    if not hardware:
        raise r.fail("hardware", "at least one hardware type", {})

    stages: list[Stage] = []
    for i, sdoc in enumerate(r.seq(r.get(top, "stages", ""), "stages")):
        path = f"stages[{i}]"
        s = r.mapping(sdoc, path)
        sname = r.name(s, "name", path)
        variants: list[Variant] = []
        for j, vdoc in enumerate(r.seq(r.get(s, "variants", path), f"{path}.variants")):
            vpath = f"{path}.variants[{j}]"
            v = r.mapping(vdoc, vpath)
            model = r.get(v, "model", vpath)
            if not isinstance(model, str) or not model:
                raise r.fail(f"{vpath}.model", "a model name from the zoo", model)
            params = r.get(v, "params", vpath, {})
            variants.append(Variant(
                name=r.name(v, "name", vpath), model=model,
                accuracy=r.number(v, "accuracy", vpath, lo=0, hi=1),
                params=dict(r.mapping(params, f"{vpath}.params")),
            ))
        if not variants:
            raise r.fail(f"{path}.variants", "at least one variant", [])
        vnames = [v.name for v in variants]
        if len(set(vnames)) != len(vnames):
            raise r.fail(f"{path}.variants", "unique variant names", vnames)
        d = r.mapping(r.get(s, "defaults", path, {}), f"{path}.defaults")
        dpath = f"{path}.defaults"
        dvariant = r.get(d, "variant", dpath, variants[0].name)
        if dvariant not in vnames:
            raise r.fail(f"{dpath}.variant", f"one of {vnames}", dvariant)
        dhw = r.get(d, "hardware", dpath, next(iter(hardware)))
        if dhw not in hardware:
            raise r.fail(f"{dpath}.hardware", f"one of {sorted(hardware)}", dhw)
        defaults = StageDefaults(
            variant=dvariant, hardware=dhw,
            max_batch=r.number(d, "max_batch", dpath, lo=1, hi=4096, default=1, integer=True),
            batch_timeout_ms=r.number(d, "batch_timeout_ms", dpath, lo=0, hi=60_000, default=5.0),
            replicas=r.number(d, "replicas", dpath, lo=1, hi=1024, default=1, integer=True),
            partitions=r.number(d, "partitions", dpath, lo=1, hi=4096, default=4, integer=True),
        )
        if defaults.replicas > defaults.partitions:
            raise r.fail(f"{dpath}.replicas", f"at most partitions ({defaults.partitions}): "
                         "replicas beyond the partition count sit idle", defaults.replicas)
        stages.append(Stage(name=sname, variants=tuple(variants), defaults=defaults))
    if not stages:
        raise r.fail("stages", "at least one stage", [])
    snames = [s.name for s in stages]
    if len(set(snames)) != len(snames):
        raise r.fail("stages", "unique stage names", snames)

    edges: list[Edge] = []
    for i, edoc in enumerate(r.seq(r.get(top, "edges", "", []) or [], "edges")):
        path = f"edges[{i}]"
        e = r.mapping(edoc, path)
        src, dst = r.get(e, "from", path), r.get(e, "to", path)
        for key, val in (("from", src), ("to", dst)):
            if val not in snames:
                raise r.fail(f"{path}.{key}", f"a stage name, one of {snames}", val)
        edges.append(Edge(
            src=src, dst=dst,
            fanout=r.number(e, "fanout", path, lo=0, default=1.0),
            probability=r.number(e, "probability", path, lo=0, hi=1, default=1.0),
        ))

    pipe = Pipeline(name=name, slo_ms=slo_ms, hardware=hardware, stages=tuple(stages),
                    edges=tuple(edges), input_content_type=ctype, source_file=source_file)
    sources = [s for s in snames if not pipe.parents(s)]
    if len(sources) != 1:
        raise r.fail("edges", "exactly one source stage (a stage with no incoming edge)", sources)
    if len(pipe.topo_order) != len(stages):
        raise r.fail("edges", "an acyclic graph", [f"{e.src}->{e.dst}" for e in edges])
    return pipe
