"""Log lines that repeat (a trainer that stays down) at most once per interval per reason.

The first occurrence of a reason is logged at once; later ones at most every ``interval_s`` with the
count suppressed in between. At most ``max_reasons`` reasons are tracked (oldest forgotten).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

DEFAULT_INTERVAL_S = 60.0


class RateLimitedLog:
    def __init__(self, logger: logging.Logger, level: int = logging.WARNING, interval_s: float = DEFAULT_INTERVAL_S,
                 max_reasons: int = 64, clock: Callable[[], float] = time.monotonic) -> None:
        self._log = logger
        self._level = level
        self._interval = interval_s
        self._max = max_reasons
        self._clock = clock
        self._last: OrderedDict[str, tuple[float, int]] = OrderedDict()  # reason → (last logged, suppressed since)
        self._lock = threading.Lock()

    def __call__(self, message: str, reason: str) -> bool:
        """Log ``message % reason`` unless ``reason`` was logged less than the interval ago; True if logged."""
        now = self._clock()
        with self._lock:
            last = self._last.get(reason)
            if last is not None and now - last[0] < self._interval:
                self._last[reason] = (last[0], last[1] + 1)
                return False
            suppressed = 0 if last is None else last[1]
            self._last[reason] = (now, 0)
            self._last.move_to_end(reason)
            while len(self._last) > self._max:
                self._last.popitem(last=False)
        suffix = f" ({suppressed} more since the last line)" if suppressed else ""
        self._log.log(self._level, message + "%s", reason, suffix)
        return True

    def reset(self) -> None:
        with self._lock:
            self._last.clear()
