"""Suite-wide: the shared running stack, the tiers' markers, and no silent skips of a tier in CI.

Fixtures
  ``stack``    -- the one running stack (``tests/stack.py``): sim pods, a trainer + predictor per pool, the router
                  proxy, started once per session.
  ``observed`` -- the same stack after ``drive``: retrained at least twice, predictions to compare, standing still.

Markers (``--strict-markers``; pyproject.toml lists them) are set from the fixtures a test uses, so they cannot
drift from what the test needs: ``stack`` (the shared stack; also ``xdist_group("stack")``, so under ``-n`` one
worker runs every such test, in file order, on one stack), ``browser`` (headless Chromium), ``root`` (writes
/etc/hosts; ``xdist_group("root")``: one writer at a time), ``engine`` (real vLLM engines; ``make test``
deselects it, ``make test-engine`` runs it).

Under ``-n`` the longest tests (``LONG_FIRST``, measured with ``--durations``) are handed out first, so that no
worker is left with one of them at the end while the other waits.

In CI (``CI`` set, as ``.ci/run`` runs) a skip of a ``browser`` or ``root`` test is a failure: the machine CI runs
on has both, so such a skip can only hide a regression.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from _pytest.nodeid import NodeId

from demo.stack import Stack
from tests.stack import SPEC, STARTUP_S, drive

FIXTURE_MARKERS = {"stack": "stack", "observed": "stack", "chromium": "browser", "hosts": "root",
                   "engine_stack": "engine"}
"""A test that uses the fixture carries the marker."""
NEVER_SKIPPED_IN_CI = ("browser", "root")
WORKER_GROUPS = ("stack", "root")
"""Under ``-n`` the tests of each run on one worker: one shared stack; one writer of /etc/hosts at a time."""
LONG_FIRST = (
    "tests/sim/test_pipeline_policies.py::test_correction_finds_the_faster_pod_in_virtual_time",
    "tests/test_openapi.py::test_fuzz_",
    "tests/proxy/test_demo.py::",
    "tests/predictor/test_survival.py::test_restart_with_the_trainer_down",
    "tests/test_keepalive.py::",
    "tests/predictor/test_trust_boundary.py::test_pulls_from_a_token_protected_trainer",
    "tests/sim/test_pipeline_policies.py::test_anti_starvation",
    "tests/sim/test_replay_cli.py::test_trainer_upload",
    "tests/sim/test_disagg.py::test_pd_policies_serve_a_trace",
    "tests/test_suite.py::test_markers_come_from_fixtures",
    "tests/trainer/test_crash.py::",
    "tests/compose/",
    "tests/trainer/test_idempotency.py::test_kill_9",
    "tests/sim/test_clairvoyant.py::",
    "tests/proxy/test_drift_live.py::",
)
"""Node-id prefixes of the tests that take 5-27 s each, longest first: moved to the front of the collection
(xdist hands out the shared stack's and /etc/hosts' groups first, then single tests in collection order)."""


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def pytest_itemcollected(item: pytest.Item) -> None:
    """Per item as it is collected, so the marks are there before any ``pytest_collection_modifyitems`` (xdist's
    reads ``xdist_group`` there; ``-m`` selects there)."""
    names = set(getattr(item, "fixturenames", ()))
    for fixture, marker in FIXTURE_MARKERS.items():
        if fixture in names and item.get_closest_marker(marker) is None:
            item.add_marker(marker)
    for marker in WORKER_GROUPS:
        if item.get_closest_marker(marker) is not None:
            item.add_marker(pytest.mark.xdist_group(marker))
            break


def _long_first(item: pytest.Item) -> int:
    return next((i for i, prefix in enumerate(LONG_FIRST) if item.nodeid.startswith(prefix)), len(LONG_FIRST))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The ``LONG_FIRST`` tests first (the rest in collection order). Name each grouped test ``<nodeid>@<group>``,
    as pytest-xdist's ``--dist loadgroup`` does: xdist 3.8 writes ``item._nodeid``, which pytest 9 no longer reads
    (the node id is ``item._id``), so without this every group would be spread over the workers."""
    items.sort(key=_long_first)
    if not config.getoption("loadgroup", False):
        return
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        if mark is not None and "@" not in item.nodeid:
            item._id = NodeId.parse(f"{item.nodeid}@{mark.args[0]}")  # type: ignore[attr-defined]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                               ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report: pytest.TestReport = yield
    tiers = [m for m in NEVER_SKIPPED_IN_CI if item.get_closest_marker(m) is not None]
    if report.skipped and tiers and in_ci():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        report.outcome = "failed"
        report.longrepr = (f"a {'/'.join(tiers)} test was skipped in CI, where it must run: {reason}")
    return report


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir: Path = tmp_path_factory.mktemp("stack")
    with Stack(SPEC, workdir, startup_timeout_s=STARTUP_S) as running:
        yield running


@pytest.fixture(scope="session")
def observed(stack: Stack) -> Stack:
    drive(stack)
    return stack
