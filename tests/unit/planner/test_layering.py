"""planner/ must not import the data plane (agents/): parse every module's imports."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_planner_never_imports_agents():
    bad = {str(p.relative_to(ROOT)): m for p in (ROOT / "planner").glob("*.py")
           for m in imported_modules(p) if m == "agents" or m.startswith("agents.")}
    assert not bad
