"""The suite's own rules (tests/conftest.py): every tier runs somewhere, markers come from fixtures, and in CI a
skipped browser or root test fails the run."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import FIXTURE_MARKERS, LONG_FIRST, in_ci

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
INNER = '''
import pytest

@pytest.fixture
def chromium():
    pytest.skip("no browser here")

@pytest.fixture
def hosts():
    pytest.skip("not root")

def test_page(chromium):
    pass

def test_names(hosts):
    pass

def test_plain():
    pytest.skip("an ordinary skip")
'''
TIERS = '''
import pytest

@pytest.fixture
def stack():
    return "a stand-in for the shared stack"

@pytest.fixture
def pools(stack):
    return [stack]

def test_direct(stack, request):
    assert request.node.get_closest_marker("stack") is not None

def test_through_a_fixture(pools, request):
    assert [m.args for m in request.node.iter_markers("xdist_group")] == [("stack",)]

def test_hosts_group(hosts, request):
    assert request.node.get_closest_marker("root") is not None
    assert [m.args for m in request.node.iter_markers("xdist_group")] == [("root",)]

@pytest.fixture
def hosts():
    return None

def test_plain(request):
    assert request.node.get_closest_marker("stack") is None
    assert request.node.get_closest_marker("xdist_group") is None
'''


def _inner(tmp_path: Path, ci: str | None, source: str = INNER, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_inner.py").write_text(source)
    markers = "\n".join(f"  {m}" for m in PYPROJECT["markers"])
    (tmp_path / "pytest.ini").write_text(f"[pytest]\nmarkers =\n{markers}\n")
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = str(REPO)
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # the inner run needs none of them (schemathesis alone: ~4 s)
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "--strict-markers", "-p", "tests.conftest",
                           "-p", "no:cacheprovider", "-c", str(tmp_path / "pytest.ini"), *args, str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_in_ci_a_skipped_browser_or_root_test_fails_the_run(tmp_path: Path) -> None:
    run = _inner(tmp_path, "true")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "2 errors" in run.stdout and "1 skipped" in run.stdout, run.stdout
    assert "a browser test was skipped in CI, where it must run: no browser here" in run.stdout
    assert "a root test was skipped in CI, where it must run: not root" in run.stdout


def test_outside_ci_the_skip_is_a_skip_with_its_reason(tmp_path: Path) -> None:
    run = _inner(tmp_path, None)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "3 skipped" in run.stdout and "no browser here" in run.stdout, run.stdout


@pytest.mark.parametrize(("value", "ci"), [("true", True), ("1", True), ("", False), ("false", False),
                                           ("0", False), (None, False)])
def test_ci_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch, value: str | None, ci: bool) -> None:
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    assert in_ci() is ci


def test_every_tier_runs_in_make_test_or_make_test_engine() -> None:
    """``make test`` deselects only ``engine``; ``make test-engine`` selects it; CI runs both."""
    addopts = PYPROJECT["addopts"]
    assert "--strict-markers" in addopts and addopts.count(" -m ") == 1 and "-m 'not engine'" in addopts
    makefile = (REPO / "Makefile").read_text()
    assert "-m engine tests/engine" in makefile
    assert [line for line in makefile.splitlines() if " -m " in line and "pytest" in line] == [
        "\t$(BIN)/pytest -m engine tests/engine"]
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert "make test" in ci and "make test-engine" in ci


def test_markers_come_from_fixtures_also_through_other_fixtures(tmp_path: Path) -> None:
    run = _inner(tmp_path, None, TIERS)
    assert run.returncode == 0 and "4 passed" in run.stdout, run.stdout + run.stderr
    run = _inner(tmp_path, None, TIERS, "-m", "not stack and not root")
    assert run.returncode == 0 and "1 passed, 3 deselected" in run.stdout, run.stdout + run.stderr


def test_every_fixture_marker_is_registered(request: pytest.FixtureRequest) -> None:
    registered = {m.split(":")[0].split("(")[0] for m in PYPROJECT["markers"]}
    assert set(FIXTURE_MARKERS.values()) <= registered, set(FIXTURE_MARKERS.values()) - registered
    assert request.node.get_closest_marker("stack") is None


@pytest.mark.parametrize("prefix", LONG_FIRST)
def test_every_long_first_prefix_names_a_test(prefix: str) -> None:
    """``LONG_FIRST`` cannot rot silently: each prefix names an existing test file (and test function)."""
    path, _, name = prefix.partition("::")
    assert (REPO / path).exists(), prefix
    if name and (REPO / path).is_file():
        assert f"def {name}" in (REPO / path).read_text(), prefix
