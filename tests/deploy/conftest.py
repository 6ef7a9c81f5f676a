"""Fixtures for the offline deploy/ checks (helpers live in deploy_manifests.py, importable from these tests)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from deploy_manifests import ALL_KUSTOMIZATIONS, CLUSTER_DIR, OVERLAYS, Rendered, render  # noqa: E402


@pytest.fixture(scope="session")
def rendered() -> dict[str, Rendered]:
    """Every kustomization under deploy/, rendered once per session."""
    return {k: Rendered(k, render(k)) for k in ALL_KUSTOMIZATIONS}


@pytest.fixture(scope="session")
def overlays(rendered: dict[str, Rendered]) -> list[Rendered]:
    return [rendered[o] for o in OVERLAYS]


@pytest.fixture(scope="session")
def cluster(rendered: dict[str, Rendered]) -> Rendered:
    return rendered[CLUSTER_DIR]
