"""One background loop on the running event loop: ``start()`` / ``await stop()`` around a periodic step.

Shared by the metrics scraper and the sample reporter (and anything else the router runs beside
the hot path). ``stop`` cancels the task and waits for it; a step that raises is logged and the
loop goes on at the next interval (a background loop never dies silently).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


class BackgroundLoop:
    def __init__(self, name: str, step: Callable[[], Awaitable[None]], interval_s: float,
                 step_first: bool = True) -> None:
        self.name = name
        self._step = step
        self._interval_s = interval_s
        self._step_first = step_first
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        if not self._step_first:
            await asyncio.sleep(self._interval_s)
        while True:
            try:
                await self._step()
            except (OSError, RuntimeError, ValueError) as exc:
                log.error("%s: step failed: %r", self.name, exc)
            await asyncio.sleep(self._interval_s)
