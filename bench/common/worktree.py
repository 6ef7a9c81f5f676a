"""Another revision of this repository checked out beside it: a detached ``git worktree`` in a directory of the
caller's choosing, removed again afterwards (``bench.router.decision --against``, ``bench.predictor.against``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench.common.paths import REPO


def worktree(rev: str, into: Path) -> Path:
    """A detached ``git worktree`` of ``rev`` under ``into`` (removed again by :func:`remove`)."""
    tree = into / rev.replace("/", "_")
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), rev], check=True,
                   capture_output=True)
    return tree


def remove(tree: Path) -> None:
    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=True,
                   capture_output=True)
