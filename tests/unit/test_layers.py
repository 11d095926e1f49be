"""The layout is the architecture: forbidden imports between layers, and import cycles between modules,
fail here (parsed with ast, so nothing is imported to check it).

Product layers: ``schemas`` < ``streams`` < ``agents``, ``planner``, ``tuner``, ``gateway`` (which talk
only through ``schemas`` records on Kafka). ``loadgen`` is the measurement lab (benchmarks, live runs,
faults, soak, reproductions): it may import every product layer, and no product layer imports it.
``slipstream`` is the CLI on top of everything; nothing below imports it."""
import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = {"schemas", "streams", "agents", "planner", "tuner", "gateway"}
LAB, CLI = "loadgen", "slipstream"
PACKAGES = PRODUCT | {LAB, CLI}
# layer -> layers it must not import
FORBIDDEN = {
    "schemas": PACKAGES - {"schemas"},
    "streams": PACKAGES - {"schemas", "streams"},
    "agents": {"planner", "tuner", "gateway", LAB, CLI},
    "planner": {"agents", "tuner", "gateway", LAB, CLI},
    "tuner": {"agents", "gateway", LAB, CLI},
    "gateway": {"agents", "planner", "tuner", LAB, CLI},  # streams and schemas only
    LAB: {CLI},
}


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and "TYPE_CHECKING" in {getattr(test, "id", None), getattr(test, "attr", None)}


def _runtime_nodes(node: ast.AST):
    """``node`` and what it holds, less ``if TYPE_CHECKING:`` blocks (imports for annotations only)."""
    yield node
    for child in ast.iter_child_nodes(node):
        if not _type_checking(child):
            yield from _runtime_nodes(child)


def imported_modules(path: Path, *, runtime_only: bool = False) -> set[str]:
    """Every absolute module name ``path`` imports (``from a.b import c`` also names ``a.b.c``);
    ``runtime_only``: less the imports under ``if TYPE_CHECKING:``."""
    out = set()
    tree = ast.parse(path.read_text())
    for node in _runtime_nodes(tree) if runtime_only else ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def imports(path: Path) -> set[str]:
    return {m.split(".")[0] for m in imported_modules(path)}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the modules of this repository it imports when it runs (in function bodies too; not
    the imports for annotations under ``if TYPE_CHECKING:``)."""
    files = {module_name(f): f for pkg in sorted(PACKAGES) for f in (ROOT / pkg).rglob("*.py")}
    return {mod: {m for m in imported_modules(f, runtime_only=True) if m in files and m != mod}
            for mod, f in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_respect_direction(layer):
    bad = []
    for f in sorted((ROOT / layer).rglob("*.py")):
        hit = imports(f) & FORBIDDEN[layer]
        if hit:
            bad.append(f"{f.relative_to(ROOT)} imports {sorted(hit)}")
    assert not bad, "\n".join(bad)


def test_no_product_layer_imports_the_lab_or_the_cli():
    assert all({LAB, CLI} <= FORBIDDEN[layer] for layer in PRODUCT)


def test_no_import_cycle_between_modules():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_cycle_check_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_imports_inside_functions():
    graph = import_graph()
    assert "slipstream.loadgen.live.run" in graph["slipstream.commands.demo"]
    assert "slipstream.planner.profiler" in graph["slipstream.loadgen.live.run"]  # imported in a function body
    assert "slipstream.planner.sim.world" not in graph["slipstream.planner.sim.stages"]  # for annotations only


@pytest.mark.parametrize("layer", sorted(PACKAGES))
def test_each_layer_says_what_it_owns(layer):
    doc = ast.get_docstring(ast.parse((ROOT / layer / "__init__.py").read_text()))
    assert doc and len(doc) > 40, f"{layer}/__init__.py needs a docstring saying what the layer owns"
