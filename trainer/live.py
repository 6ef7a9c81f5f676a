"""The live bundle: one reference swapped atomically, plus an async notify for long-polls."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable

from shared.model import LoadedBundle

SLICE_S = 1.0


class LiveBundle:
    def __init__(self) -> None:
        self._loaded: LoadedBundle | None = None
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None
        self._closing = False

    def get(self) -> LoadedBundle | None:
        return self._loaded

    @property
    def version(self) -> int | None:
        loaded = self._loaded
        return None if loaded is None else loaded.version

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Called once from the event loop (lifespan) so publishes can wake long-polls."""
        self._loop = loop
        self._event = asyncio.Event()

    def set(self, loaded: LoadedBundle) -> None:
        """Make ``loaded`` live (any thread) and wake waiters."""
        with self._lock:
            self._loaded = loaded
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake)

    def close(self) -> None:
        """Release every held long-poll now (server shutting down); safe from any thread."""
        self._closing = True
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        if self._event is not None:
            self._event.set()
        self._event = asyncio.Event()

    async def wait_change(self, version: int | None, timeout: float,
                          gone: Callable[[], Awaitable[bool]] | None = None) -> None:
        """Return when the live version differs from ``version``, after ``timeout`` seconds, or
        (checked every ``SLICE_S``) when ``gone()`` says the client has disconnected."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.version == version and self._event is not None and not self._closing:
            remaining = deadline - loop.time()
            if remaining <= 0 or (gone is not None and await gone()):
                return
            try:
                await asyncio.wait_for(self._event.wait(), min(remaining, SLICE_S))
            except TimeoutError:
                continue
