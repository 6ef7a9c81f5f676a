"""Install headless Chromium (Debian package ``chromium``) for the status-page tests, when it is missing.

    python3 deploy/install_chromium.py        # run by `make install`

Does nothing when a Chromium is already on PATH. Otherwise, as root on a machine with apt-get, runs
``apt-get update`` and ``apt-get install -y chromium`` (non-interactive). When that is not possible (not
root, no apt-get, the package cannot be had) it says why and exits 0: ``make install`` goes on and the
browser tests (``tests/observe/test_pages.py``) are skipped with that reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

NAMES = ("chromium", "chromium-browser", "google-chrome")
TIMEOUT_S = 900


def found() -> str | None:
    return next((path for path in map(shutil.which, NAMES) if path), None)


def _apt(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run(["apt-get", *args], env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


def install() -> str:
    """Installs Chromium if it can; returns what happened (one line)."""
    path = found()
    if path is not None:
        return f"chromium already installed: {path}"
    if shutil.which("apt-get") is None:
        return "chromium not installed: no apt-get on this machine (the browser tests will be skipped)"
    if os.geteuid() != 0:
        return "chromium not installed: apt-get needs root (run `apt-get install chromium`; browser tests skipped)"
    update = _apt("update", "-q")
    if update.returncode != 0:
        return f"chromium not installed: apt-get update failed: {update.stderr.strip()[-300:]}"
    result = _apt("install", "-y", "-q", "chromium")
    if result.returncode != 0 or found() is None:
        return f"chromium not installed: apt-get install chromium failed: {result.stderr.strip()[-300:]}"
    return f"installed chromium: {found()}"


if __name__ == "__main__":
    print(install())
    sys.exit(0)
