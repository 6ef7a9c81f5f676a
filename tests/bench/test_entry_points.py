"""bench.common.tiers: every benchmark entry point is in exactly one tier (nothing unmaintained), every tier's module
exists, and every entry point answers ``--help`` (run in this process: ``runpy``, not a subprocess each)."""

from __future__ import annotations

import ast
import importlib.util
import re
import runpy
import sys
from functools import cache
from pathlib import Path

import pytest

from bench.common.paths import REPO
from bench.common.tiers import NOT_IN_TIERS, QUICK_BUDGET_MINUTES, TIERS

BENCH = REPO / "bench"
TIER_MODULES = {e.module for entries in TIERS.values() for e in entries}


def _is_main_guard(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    test = node.test
    return (isinstance(test.left, ast.Name) and test.left.id == "__name__" and len(test.comparators) == 1
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value == "__main__")


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__main__" else parts)


@cache
def main_modules() -> frozenset[str]:
    """Every module under bench/ with ``if __name__ == "__main__"`` (a package's ``__main__`` as the package)."""
    return frozenset(_module_name(path) for path in BENCH.rglob("*.py")
                     if any(_is_main_guard(node) for node in ast.parse(path.read_text()).body))


def test_every_entry_point_is_in_exactly_one_tier_or_named_as_not_a_benchmark() -> None:
    found = main_modules()
    assert "bench.trainer.service" in found and "bench.real_engine" in found  # the scan sees modules and packages
    assert not found - TIER_MODULES - set(NOT_IN_TIERS), "entry points in no tier"
    assert not TIER_MODULES & set(NOT_IN_TIERS)
    assert set(NOT_IN_TIERS) <= found, "NOT_IN_TIERS names a module without a __main__ guard"
    for module in TIER_MODULES:
        tiers = [name for name, entries in TIERS.items() if any(e.module == module for e in entries)]
        assert len(tiers) == 1, (module, tiers)


@pytest.mark.parametrize("module", sorted(TIER_MODULES))
def test_every_tier_module_exists_and_is_an_entry_point(module: str) -> None:
    assert importlib.util.find_spec(module) is not None
    assert module in main_modules()


def test_results_go_under_their_area_and_the_quick_tier_fits_its_budget() -> None:
    for entries in TIERS.values():
        for e in entries:
            area = e.module.split(".")[1]
            assert e.result.startswith(f"bench/results/{area}/"), e
            if not e.stdout and e.module not in ("bench.scaling.fanout", "bench.proxy.overhead"):
                assert e.result in e.argv, f"{e.command}: writes {e.result} only if told to"
            assert all(not a.startswith("bench/") or a.startswith("bench/results/") for a in e.argv), e
        assert len({e.result for e in entries}) == len(entries), "two entries of a tier write one file"
    assert sum(e.minutes for e in TIERS["quick"]) <= QUICK_BUDGET_MINUTES


def test_the_makefile_runs_each_tier() -> None:
    makefile = (REPO / "Makefile").read_text()
    phony = re.search(r"^\.PHONY:(.*)$", makefile, re.M)
    assert phony is not None
    for target, tier in (("bench", "quick"), ("bench-full", "full"), ("bench-engine", "engine")):
        assert target in phony[1].split()
        rule = re.search(rf"^{target}:(.*)\n\t(.*)$", makefile, re.M)
        assert rule is not None and rule[2].endswith(f"-m bench.common.tiers {tier}"), target
    engine_rule = re.search(r"^bench-engine:(.*)$", makefile, re.M)
    assert engine_rule is not None and "engine" in engine_rule[1].split()


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("ignore:.*found in sys.modules after import of package:RuntimeWarning")
@pytest.mark.parametrize("module", sorted(TIER_MODULES | set(NOT_IN_TIERS)))
def test_answers_help(module: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", [module, "--help"])
    with pytest.raises(SystemExit) as exited:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    assert exited.value.code in (0, None)
    assert "usage:" in capsys.readouterr().out
