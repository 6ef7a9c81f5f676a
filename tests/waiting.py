"""Waiting on a condition, never on a moment: the suite runs on a shared, loaded 2-core machine."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(check: Callable[[], T], timeout: float = 30.0, interval: float = 0.02, what: str = "") -> T:
    """Poll ``check`` until it returns a truthy value (returned) or ``timeout`` s pass (AssertionError)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {timeout:g} s{': ' + what if what else ''}")
        time.sleep(interval)
