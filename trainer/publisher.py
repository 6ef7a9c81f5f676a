"""Publishing versioned bundles (shared.bundle format) and pruning old versions.

Versions increase by one from the highest on disk. Only ``keep`` versions stay on disk; the
live one is never removed. Left-over temp dirs from a crash during a write are cleaned at start.
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shared.bundle import Bundle, ModelFiles, assemble, current_version, read_bundle, version_dir, write_bundle
from shared.timefmt import rfc3339

log = logging.getLogger(__name__)
VERSION_DIR = re.compile(r"^v(\d{6,})$")


class Publisher:
    def __init__(self, root: Path, key: bytes | None, keep: int) -> None:
        self.root, self.key, self.keep = root, key, keep
        self._highest = 0
        root.mkdir(parents=True, exist_ok=True)
        for tmp in root.glob(".tmp-*"):
            shutil.rmtree(tmp, ignore_errors=True)

    def versions(self) -> list[int]:
        found = (VERSION_DIR.match(p.name) for p in self.root.iterdir() if p.is_dir())
        return sorted(int(m.group(1)) for m in found if m)

    def live_version(self) -> int | None:
        return current_version(self.root)

    def publish(self, models: ModelFiles, meta: Mapping[str, Any]) -> Bundle:
        """Write version N+1 with ``models`` (name → (file bytes, manifest entry)), make it live, prune."""
        self.root.mkdir(parents=True, exist_ok=True)
        version = max([self._highest, *self.versions(), self.live_version() or 0]) + 1
        manifest, files = assemble(version, rfc3339(), models, meta, self.key)
        path = write_bundle(self.root, manifest, files)
        self.observe(version)
        self.prune()
        return read_bundle(path, self.key)

    def observe(self, version: int) -> None:
        """Versions only grow, even if the bundle directory is wiped while running."""
        self._highest = max(self._highest, version)

    def prune(self) -> None:
        live = self.live_version()
        for version in self.versions()[: -self.keep]:
            if version != live:
                shutil.rmtree(version_dir(self.root, version), ignore_errors=True)
                log.debug("pruned bundle v%d", version)

    def path_of(self, version: int, filename: str) -> Path | None:
        """The file ``filename`` of kept version ``version``, or None (names are checked, no traversal)."""
        if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", filename):
            return None
        path = version_dir(self.root, version) / filename
        return path if path.is_file() else None
