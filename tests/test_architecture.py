"""The import rules of the house, checked with stdlib ``ast`` over the product packages.

- ``shared`` imports none of the other packages; ``trainer``, ``predictor`` and ``router_client``
  import only ``shared``; ``sim`` may import ``shared``, ``router_client`` and ``trainer`` (it is the
  harness that plugs the router's pipeline and the trainer's fit into virtual time).
- Nothing in the product imports ``bench`` or ``demo``.
- No import cycles among product modules — ``TYPE_CHECKING`` and function-level imports included.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("shared", "trainer", "predictor", "router_client", "sim")
ALLOWED: dict[str, set[str]] = {
    "shared": set(),
    "trainer": {"shared"},
    "predictor": {"shared"},
    "router_client": {"shared"},
    "sim": {"shared", "router_client", "trainer"},
}
OURS = (*PRODUCT, "bench", "demo", "tests")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def product_modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PRODUCT for p in sorted((ROOT / pkg).rglob("*.py"))}


def imported(source: str, package: str, modules: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """(module imported, line) for every import statement in ``source`` (anywhere: module level,
    functions, ``if TYPE_CHECKING:``); ``package`` resolves relative imports."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield (full if full in modules else base), node.lineno


def edges() -> dict[str, list[tuple[str, int]]]:
    modules = product_modules()
    out: dict[str, list[tuple[str, int]]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        out[name] = [(target, line) for target, line in imported(path.read_text(), package, modules)
                     if target.split(".")[0] in OURS]
    return out


def test_packages_import_only_what_they_may() -> None:
    problems = []
    for module, targets in edges().items():
        top = module.split(".")[0]
        for target, line in targets:
            other = target.split(".")[0]
            if other != top and other not in ALLOWED[top]:
                problems.append(f"{module}:{line} imports {target}")
    assert not problems, "\n".join(problems)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def with_packages(importer: str, target: str, modules: dict[str, list[tuple[str, int]]]) -> set[str]:
    """Importing ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` first: those are edges too — except the
    importer's own ancestors, which are already running when it is imported."""
    parts = target.split(".")
    own = importer.split(".")
    ancestors = {".".join(own[:i]) for i in range(1, len(own))}
    return ({".".join(parts[:i]) for i in range(1, len(parts) + 1)} - ancestors) & set(modules)


def test_no_import_cycles_among_product_modules() -> None:
    found = edges()
    graph = {module: set().union(*[with_packages(module, t, found) for t, _ in targets]) - {module}
             for module, targets in found.items()}
    assert _cycles(graph) == []


@pytest.mark.parametrize(("graph", "expected"), [
    ({"a": {"b"}, "b": {"a"}, "c": set()}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
])
def test_cycle_finder_finds_cycles(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert _cycles(graph) == expected


def test_the_checker_sees_type_checking_and_function_level_imports() -> None:
    """A type-only import is still an edge (it is what tied classifier.py and router.py together)."""
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from router_client.router import X\n"
              "def f():\n    import sim.replay\n    from . import scraper\n")
    modules = product_modules()
    assert [t for t, _ in imported(source, "router_client", modules)] == [
        "typing", "router_client.router", "sim.replay", "router_client.scraper"]
