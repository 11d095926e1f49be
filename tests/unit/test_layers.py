"""The layout is the architecture: forbidden imports between layers, and import cycles between modules,
fail here (parsed with ast, so nothing is imported to check it).

Every layer is a subpackage of ``slipstream`` (a top-level folder of the repository, mapped into the
namespace when installed). Product layers: ``schemas`` < ``streams`` < ``agents``, ``planner``, ``tuner``,
``gateway`` (which talk only through ``schemas`` records on Kafka; the tuner reads the planner's hand-off
as a record, never its code). ``loadgen`` is the measurement lab (benchmarks, live runs, faults, soak,
reproductions): it may import every product layer, and no product layer imports it. The CLI
(``slipstream.cli``, ``slipstream.commands`` and the rest of ``slipstream/``) is on top of everything;
nothing below imports it. Nothing imports a layer by its bare folder name.

Inside the layers, modules import each other (in their own layer and across layers) by explicit relative
imports (``from ..acks import AckTracker``, ``from ...streams import topics`` in agents/stage/commit.py),
which name the same files in the folders as in the namespace; they are read here as the absolute names
they resolve to from the importing file's module, so every rule above, and the cycle check, holds for
them as for absolute ones."""
import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = {"schemas", "streams", "agents", "planner", "tuner", "gateway"}
LAB, CLI = "loadgen", "slipstream"  # CLI: the modules of slipstream/ itself
PACKAGES = PRODUCT | {LAB, CLI}
NS = "slipstream"
# layer -> layers it must not import
FORBIDDEN = {
    "schemas": PACKAGES - {"schemas"},
    "streams": PACKAGES - {"schemas", "streams"},
    "agents": {"planner", "tuner", "gateway", LAB, CLI},
    "planner": {"agents", "tuner", "gateway", LAB, CLI},
    "tuner": {"agents", "planner", "gateway", LAB, CLI},
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
    """Every module name ``path`` imports, absolute (``from a.b import c`` also names ``a.b.c``; a relative
    import is named as what it resolves to from ``path``'s own module, ``module_name(path)``);
    ``runtime_only``: less the imports under ``if TYPE_CHECKING:``."""
    out = set()
    tree = ast.parse(path.read_text())
    for node in _runtime_nodes(tree) if runtime_only else ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (module := absolute(path, node)):
            names = {f"{module}.{a.name}" for a in node.names}
            out |= names  # `from slipstream import schemas` imports a layer, not the public API:
            if module != NS or any(layer_of(n) == CLI for n in names):
                out.add(module)
    return out


def absolute(path: Path, node: ast.ImportFrom) -> str | None:
    """The absolute name of the module ``node`` imports from: ``from ..acks import X`` in
    agents/stage/commit.py is ``slipstream.agents.acks``, ``from .. import schemas`` in streams/codec.py
    ``slipstream``. None: a relative import above the top-level package."""
    if node.level == 0:
        return node.module
    package = module_name(path).split(".")
    if path.name != "__init__.py":  # a package's __init__ is the package itself
        package = package[:-1]
    if node.level > len(package):
        return None
    base = package[:len(package) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def layer_of(module: str) -> str | None:
    """The layer a module name belongs to: ``slipstream.<layer>...`` or the CLI; None: not ours."""
    parts = module.split(".")
    if parts[0] != NS:
        return None
    return parts[1] if len(parts) > 1 and parts[1] in PRODUCT | {LAB} else CLI


def imports(path: Path) -> set[str]:
    """The layers ``path`` imports (``slipstream`` alone, the public API, counts as the CLI's)."""
    return {layer for m in imported_modules(path) if (layer := layer_of(m))}


def module_name(path: Path) -> str:
    """The module a file is: a layer's folder is ``slipstream.<layer>``; slipstream/ and tests/ are named by their path."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    parts = parts[:-1] if parts[-1] == "__init__" else parts
    return ".".join((NS, *parts) if parts[0] in PRODUCT | {LAB} else parts)


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


def test_no_module_imports_a_layer_by_its_bare_name():
    bare = PRODUCT | {LAB}
    bad = [f"{f.relative_to(ROOT)} imports {sorted(hit)}"
           for pkg in sorted(PACKAGES | {"tests"}) for f in sorted((ROOT / pkg).rglob("*.py"))
           if (hit := {m.split(".")[0] for m in imported_modules(f)} & bare)]
    assert not bad, "\n".join(bad)


def test_layers_are_read_from_the_namespace():
    assert layer_of("slipstream.tuner.service") == "tuner" and layer_of("slipstream.cli") == CLI
    assert layer_of("slipstream") == CLI and layer_of("tuner" + ".service") is None  # a bare name: not ours


def test_no_import_cycle_between_modules():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_cycle_check_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_relative_imports_are_read_as_the_modules_they_resolve_to():
    def resolved(file: str, statement: str) -> str | None:
        return absolute(ROOT / file, ast.parse(statement).body[0])

    assert resolved("agents/stage/commit.py", "from ..acks import AckTracker") == "slipstream.agents.acks"
    assert resolved("agents/stage/commit.py", "from ...streams import topics") == "slipstream.streams"
    assert resolved("agents/stage/__init__.py", "from .serve import Server") == "slipstream.agents.stage.serve"
    assert resolved("streams/codec.py", "from .. import schemas") == "slipstream"
    assert resolved("streams/codec.py", "from ... import x") is None  # above the top-level package
    assert resolved("slipstream/commands/demo.py", "from ..cli import main") == "slipstream.cli"
    assert {"slipstream.agents.acks", "slipstream.streams.topics"} <= imported_modules(ROOT / "agents/stage/commit.py")
    assert imports(ROOT / "streams/codec.py") == {"schemas", "streams"}  # `from .. import schemas`: a layer, not the CLI


def test_the_graph_sees_imports_inside_functions():
    graph = import_graph()
    assert "slipstream.loadgen.live.run" in graph["slipstream.commands.demo"]
    assert "slipstream.planner.profiler" in graph["slipstream.loadgen.live.run"]  # imported in a function body
    assert "slipstream.planner.sim.world" not in graph["slipstream.planner.sim.stages"]  # for annotations only


@pytest.mark.parametrize("layer", sorted(PACKAGES))
def test_each_layer_says_what_it_owns(layer):
    doc = ast.get_docstring(ast.parse((ROOT / layer / "__init__.py").read_text()))
    assert doc and len(doc) > 40, f"{layer}/__init__.py needs a docstring saying what the layer owns"
