"""Waiting on a condition, never on a moment: the suite runs on a shared, loaded 2-core machine.

``wait_for`` polls from a plain test; ``wait_for_async`` is the same for a coroutine whose event loop also runs
what is waited on (a blocking poll would stop it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class _Deadline:
    def __init__(self, timeout: float, what: str) -> None:
        self.timeout, self.what = timeout, what
        self.end = time.monotonic() + timeout

    def check(self) -> None:
        if time.monotonic() >= self.end:
            raise AssertionError(f"condition not met within {self.timeout:g} s{': ' + self.what if self.what else ''}")


def wait_for(check: Callable[[], T], timeout: float = 30.0, interval: float = 0.02, what: str = "") -> T:
    """Poll ``check`` until it returns a truthy value (returned) or ``timeout`` s pass (AssertionError)."""
    deadline = _Deadline(timeout, what)
    while True:
        value = check()
        if value:
            return value
        deadline.check()
        time.sleep(interval)


async def wait_for_async(check: Callable[[], T], timeout: float = 30.0, interval: float = 0.02, what: str = "") -> T:
    """:func:`wait_for` inside a coroutine: sleeps with ``asyncio.sleep`` between polls."""
    deadline = _Deadline(timeout, what)
    while True:
        value = check()
        if value:
            return value
        deadline.check()
        await asyncio.sleep(interval)
