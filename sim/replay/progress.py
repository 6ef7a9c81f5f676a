"""A dependency-free progress bar on stderr, throttled."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    def __init__(self, label: str, stream: TextIO | None = None, min_interval_s: float = 0.2,
                 enabled: bool = True) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.min_interval_s = min_interval_s
        self.enabled = enabled
        self._t0 = time.perf_counter()
        self._last = 0.0

    def __call__(self, done: int, total: int, sim_t: float) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if done < total and now - self._last < self.min_interval_s:
            return
        self._last = now
        frac = done / total if total else 1.0
        bar = "#" * int(frac * 30)
        self.stream.write(
            f"\r{self.label:<16} [{bar:<30}] {frac * 100:5.1f}% {done}/{total} "
            f"sim {sim_t:8.1f}s wall {now - self._t0:6.1f}s"
        )
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()
