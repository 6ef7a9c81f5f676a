"""The tests of what people look at (status pages, demo report, Grafana dashboard) read the shared stack after
it was driven (``observed``, tests/conftest.py). ``chromium`` — the browser's path, or a skip naming why there is
none (a failure in CI: tests/conftest.py)."""

from __future__ import annotations

import pytest

from demo.browser import find_chromium


@pytest.fixture(scope="session")
def chromium() -> str:
    path = find_chromium()
    if path is None:
        pytest.skip("chromium is not installed and `make install` could not install it (Debian package "
                    "`chromium`: needs root and apt-get; see deploy/install_chromium.py)")
    return path
