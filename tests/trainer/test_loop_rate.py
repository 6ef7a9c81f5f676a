"""The retrain loop keeps a fixed rate: cycles start ``interval`` apart even when each takes seconds."""

from __future__ import annotations

import threading
import time
from typing import cast

from trainer.cycle import Retrainer
from trainer.loop import RetrainLoop
from trainer.metrics import TrainerMetrics


class SlowRetrainer:
    """Stands in for a cycle that takes ``seconds`` (the loop only calls ``run_once``)."""

    def __init__(self, seconds: float, cycles: int) -> None:
        self.seconds, self.starts = seconds, list[float]()
        self.last_cycle_fitted = False
        self.done = threading.Event()
        self._cycles = cycles

    def run_once(self) -> None:
        self.starts.append(time.monotonic())
        time.sleep(self.seconds)
        if len(self.starts) >= self._cycles:
            self.done.set()


def test_cycles_start_an_interval_apart_not_an_interval_after_the_last_end() -> None:
    slow = SlowRetrainer(0.6, cycles=5)
    loop = RetrainLoop(cast(Retrainer, slow), 1.0, TrainerMetrics())
    loop.start()
    try:
        assert slow.done.wait(60), "five cycles did not run"
    finally:
        loop.stop()
    gaps = sorted(b - a for a, b in zip(slow.starts, slow.starts[1:], strict=False))
    # fixed delay would give 1.6 s gaps; fixed rate 1.0 s (a loaded machine may stretch one or two)
    assert gaps[len(gaps) // 2] < 1.3, gaps


def test_an_overrunning_cycle_is_followed_at_once_without_catch_up_bursts() -> None:
    slow = SlowRetrainer(0.5, cycles=4)
    loop = RetrainLoop(cast(Retrainer, slow), 0.2, TrainerMetrics())
    loop.start()
    try:
        assert slow.done.wait(60), "four cycles did not run"
    finally:
        loop.stop()
    gaps = [b - a for a, b in zip(slow.starts, slow.starts[1:], strict=False)]
    assert all(g >= 0.5 for g in gaps), gaps  # never two cycles at once, never a burst of short gaps
