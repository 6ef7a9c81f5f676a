"""The simulator's module graph has no cycles, not even through ``TYPE_CHECKING`` imports."""

from __future__ import annotations

import ast
from pathlib import Path

SIM = Path(__file__).resolve().parents[2] / "sim"


def _module_name(path: Path) -> str:
    rel = path.relative_to(SIM.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _imports(path: Path, known: set[str]) -> set[str]:
    """Every ``sim.*`` module imported anywhere in the file (package ``__init__`` re-exports excluded)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        out.update(n for n in names if n in known)
    return out


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in SIM.rglob("*.py")}
    known = set(files)
    return {name: _imports(path, known) - {name} for name, path in files.items()
            if not path.name == "__init__.py"}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_detector_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_sim_modules_have_no_import_cycle() -> None:
    graph = _graph()
    assert "sim.engine.fastforward" in graph and "sim.pod.metrics" in graph
    assert _cycle(graph) is None
