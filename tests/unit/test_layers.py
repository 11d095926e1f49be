"""The layout is the architecture: forbidden imports between layers fail here (parsed with ast)."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# layer -> layers it must not import
FORBIDDEN = {
    "streams": {"agents", "planner", "tuner", "loadgen", "slipstream", "gateway"},
    "schemas": {"agents", "planner", "tuner", "loadgen", "slipstream", "streams", "gateway"},
    "agents": {"planner", "tuner", "loadgen", "slipstream", "gateway"},
    "planner": {"agents", "tuner", "loadgen", "slipstream", "gateway"},
    "tuner": {"agents", "loadgen", "slipstream", "gateway"},
    "loadgen": {"agents", "tuner", "slipstream", "gateway"},
    "gateway": {"agents", "planner", "tuner", "loadgen", "slipstream"},  # streams and schemas only
}


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_respect_direction(layer):
    bad = []
    for f in sorted((ROOT / layer).rglob("*.py")):
        hit = imports(f) & FORBIDDEN[layer]
        if hit:
            bad.append(f"{f.relative_to(ROOT)} imports {sorted(hit)}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("layer", ["streams", "agents", "planner", "tuner", "loadgen", "schemas", "slipstream", "gateway"])
def test_each_layer_says_what_it_owns(layer):
    doc = ast.get_docstring(ast.parse((ROOT / layer / "__init__.py").read_text()))
    assert doc and len(doc) > 40, f"{layer}/__init__.py needs a docstring saying what the layer owns"
