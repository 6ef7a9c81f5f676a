"""Locate the read-only shared data folder (``../shared/data`` beside the repository)."""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "SIM_SHARED_DATA"


def shared_data_dir() -> Path:
    """Return the shared data directory.

    ``$SIM_SHARED_DATA`` wins; otherwise ``<repo>/../shared/data`` (the CI layout), falling back to
    ``<repo>/shared/data`` if only that one exists.
    """
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[1]
    beside = repo.parent / "shared" / "data"
    if beside.is_dir():
        return beside
    return repo / "shared" / "data"


def default_trace() -> Path:
    return shared_data_dir() / "azure_llm_2023_conv.csv"


def profile_path(name: str) -> Path:
    return shared_data_dir() / "profiles" / name
