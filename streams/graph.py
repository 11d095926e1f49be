"""Pipeline graph queries, shared by the pipeline spec (``slipstream.streams.spec.Pipeline``) and the planning
problem (``slipstream.planner.problem.Problem``): both hold ``stages`` (with ``name``) and ``edges`` (with
``src``, ``dst``, ``fanout``, ``probability``), so one set of definitions serves both and the planner
cannot drift from the data plane's idea of the graph."""
from __future__ import annotations

from typing import Any, Iterable, Sequence

from .docmodel import did_you_mean


def reference_error(names: Sequence[str], edges: Iterable[Any]) -> tuple[str, str, object] | None:
    """What is wrong with a document's stage names and edges, as (field path, expected, got), or None:
    the names unique, every edge's ``src`` and ``dst`` one of them. Both readers (pipeline spec,
    planning problem) refuse what this names, before :meth:`StageGraph.shape_error`."""
    names = list(names)
    if len(set(names)) != len(names):
        return "stages", "unique stage names", names
    for i, e in enumerate(edges):
        for key, val in (("from", e.src), ("to", e.dst)):
            if val not in names:
                return f"edges[{i}].{key}", f"a stage name, one of {names}{did_you_mean(val, names)}", val
    return None


class StageGraph:
    """Mixin for a frozen dataclass with ``stages`` and ``edges``."""

    stages: tuple[Any, ...]
    edges: tuple[Any, ...]

    def stage(self, name: str):
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(f"no stage {name!r} (stages: {[s.name for s in self.stages]})")

    def children(self, stage: str) -> tuple:
        return tuple(e for e in self.edges if e.src == stage)

    def parents(self, stage: str) -> tuple:
        return tuple(e for e in self.edges if e.dst == stage)

    @property
    def source(self) -> str:
        return next(s.name for s in self.stages if not self.parents(s.name))

    @property
    def sinks(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.stages if not self.children(s.name))

    @property
    def topo_order(self) -> tuple[str, ...]:
        """Stage names in topological order (shorter than ``stages`` when the graph has a cycle)."""
        order: list[str] = []
        indeg = {s.name: len(self.parents(s.name)) for s in self.stages}
        ready = [n for n, d in indeg.items() if d == 0]
        while ready:
            n = ready.pop(0)
            order.append(n)
            for e in self.children(n):
                indeg[e.dst] -= 1
                if indeg[e.dst] == 0:
                    ready.append(e.dst)
        return tuple(order)

    def shape_error(self) -> tuple[str, object] | None:
        """What is wrong with the graph's shape, as (expected, got), or None: one source, no cycle.
        Both readers (pipeline spec, planning problem) refuse a graph this names."""
        sources = [s.name for s in self.stages if not self.parents(s.name)]
        if len(sources) != 1:
            return "exactly one source stage (a stage with no incoming edge)", sources
        if len(self.topo_order) != len(self.stages):
            return "an acyclic graph", [f"{e.src}->{e.dst}" for e in self.edges]
        return None

    def visit_ratio(self, stage: str) -> float:
        """s_m: expected items reaching ``stage`` per pipeline request: the sum over paths of the
        product of fanout x probability along the path (the planner's and the tuner's s_m)."""
        if not self.parents(stage):
            return 1.0
        return sum(self.visit_ratio(e.src) * e.fanout * e.probability for e in self.parents(stage))

    def paths(self) -> list[tuple[str, ...]]:
        """Every source-to-sink path, as stage names."""
        out: list[tuple[str, ...]] = []

        def walk(node: str, acc: tuple[str, ...]) -> None:
            acc = acc + (node,)
            kids = self.children(node)
            if not kids:
                out.append(acc)
            for e in kids:
                walk(e.dst, acc)

        walk(self.source, ())
        return out
