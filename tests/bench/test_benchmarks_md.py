"""BENCHMARKS.md shows current figures only, each found in the result file its row links, re-measured by a command
that exists; README.md quotes no figure that BENCHMARKS.md does not show."""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "BENCHMARKS.md"
MAX_LINES = 150
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
LINK = re.compile(r"\]\(([^)#]+)(?:#[^)]*)?\)")
MODULE = re.compile(r"`([a-z_][\w.]*)")


def _rows() -> list[dict[str, str]]:
    lines = BENCHMARKS.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| area |"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows.append(dict(zip(header, cells, strict=True)))
    return rows


def _numbers(text: str) -> list[str]:
    return [THOUSANDS.sub("", n).rstrip(",") for n in NUMBER.findall(text)]


def _json_values(node: Any) -> Iterator[float]:
    if isinstance(node, bool):
        return
    if isinstance(node, int | float):
        yield float(node)
    elif isinstance(node, dict):
        for value in node.values():
            yield from _json_values(value)
    elif isinstance(node, list):
        for value in node:
            yield from _json_values(value)


def _found(token: str, text: str, values: list[float]) -> bool:
    if re.search(rf"(?<![\d.]){re.escape(token)}(?!\d)", text):
        return True
    decimals = len(token.split(".")[1]) if "." in token else 0
    target = float(token)
    return any(round(v, decimals) == target or round(100 * v, decimals) == target for v in values)


def test_benchmarks_md_is_one_page_of_current_figures() -> None:
    text = BENCHMARKS.read_text()
    assert len(text.splitlines()) <= MAX_LINES, f"BENCHMARKS.md has {len(text.splitlines())} lines (≤ {MAX_LINES})"
    assert "⟨" not in text, "a placeholder is left in BENCHMARKS.md"
    for word in ("this session", "this VM", "morning"):
        assert word not in text, f"BENCHMARKS.md says {word!r}: history goes to docs/benchmarks-history.md"


ROWS = _rows()


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['area']}: {r['target'][:40]}" for r in ROWS])
def test_every_figure_is_in_its_result_file(row: dict[str, str]) -> None:
    links = LINK.findall(row["result file"])
    assert links, f"no result file linked: {row['result file']!r}"
    files = [REPO / link for link in links]
    missing = [str(f) for f in files if not f.is_file()]
    assert not missing, f"result files missing: {missing}"
    text = THOUSANDS.sub("", "\n".join(f.read_text() for f in files))
    values = [v for f in files if f.suffix == ".json" for v in _json_values(json.loads(f.read_text()))]
    absent = [n for n in _numbers(row["figure"]) if not _found(n, text, values)]
    assert not absent, f"figures not in {links}: {absent}"


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['area']}: {r['target'][:40]}" for r in ROWS])
def test_every_command_names_a_module_that_exists(row: dict[str, str]) -> None:
    modules = MODULE.findall(row["command"])
    assert modules, f"no command in {row['command']!r}"
    for module in modules:
        if module in ("make", "time"):
            continue
        assert importlib.util.find_spec(module) is not None, f"{module}: no such module"


def test_readme_figures_are_in_benchmarks_md() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Benchmarks"):]
    shown = THOUSANDS.sub("", BENCHMARKS.read_text())
    rows = [line for line in section.splitlines() if line.startswith("|") and not line.startswith("|---")][1:]
    assert 0 < len(rows) <= 5, f"README.md shows {len(rows)} headline figures (≤ 5, from BENCHMARKS.md)"
    for line in rows:
        figure = line.strip("|").split("|")[1]
        absent = [n for n in _numbers(figure) if not _found(n, shown, [])]
        assert not absent, f"README.md figures not in BENCHMARKS.md: {absent} in {line!r}"
