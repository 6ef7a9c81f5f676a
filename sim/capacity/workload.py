"""The requests a capacity search replays: the whole trace, and a *coarse slice* for the cheap pass.

The coarse slice is the contiguous window of ``coarse_fraction`` of the trace's duration with the most
tokens (prompt + output): the peak decides the P99. It is replayed after a warm-up of
``warmup_fraction`` of the duration (the requests just before it, not judged), so pods and
latency models do not start cold at the peak. Items are built once on the whole trace and sliced,
so a request has the same prefix identity and ``max_tokens`` in both.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim.cluster.simulation import ReplayItem
from sim.replay.items import build_items
from sim.workload.budgets import MaxTokensPolicy
from sim.workload.trace import load_trace

MIN_COARSE_REQUESTS = 3000
"""Below this many requests in the trace the search runs on the whole trace only."""


@dataclass(frozen=True)
class Window:
    """Items to replay; the first ``judged_from`` of them are warm-up and not judged."""

    name: str
    items: tuple[ReplayItem, ...]
    judged_from: int

    @property
    def judged(self) -> int:
        return len(self.items) - self.judged_from

    @property
    def span_s(self) -> float:
        if not self.items:
            return 0.0
        return self.items[-1].view.arrival_s - self.items[self.judged_from].view.arrival_s


@dataclass(frozen=True)
class Workload:
    full: Window
    coarse: Window | None

    def describe(self) -> dict[str, object]:
        out: dict[str, object] = {"requests": self.full.judged, "span_s": round(self.full.span_s, 1)}
        if self.coarse is not None:
            c = self.coarse
            first = c.items[c.judged_from].view.arrival_s
            out["coarse"] = {"requests": c.judged, "warmup_requests": c.judged_from,
                             "start_s": round(first, 1), "span_s": round(c.span_s, 1)}
        return out


def load_workload(trace: Path, rate_scale: float, seed: int, slo_ttft_ms: float, max_tokens: MaxTokensPolicy,
                  coarse_fraction: float, warmup_fraction: float, limit: int | None = None,
                  start_s: float = 0.0, duration_s: float | None = None) -> Workload:
    """``start_s`` / ``duration_s``: a slice of the trace, in its original time (as ``sim.replay --start``)."""
    items = tuple(build_items(load_trace(trace, rate_scale, limit, duration_s, start_s), seed, slo_ttft_ms=slo_ttft_ms,
                              max_tokens=max_tokens))
    full = Window("full", items, 0)
    if coarse_fraction <= 0 or coarse_fraction >= 1 or len(items) < MIN_COARSE_REQUESTS:
        return Workload(full, None)
    return Workload(full, _peak_window(items, coarse_fraction, warmup_fraction))


def _peak_window(items: tuple[ReplayItem, ...], fraction: float, warmup_fraction: float) -> Window:
    t = np.array([i.view.arrival_s for i in items])
    tokens = np.cumsum([i.view.prompt_tokens + i.output_tokens for i in items], dtype=np.float64)
    duration = t[-1] - t[0]
    width = fraction * duration
    ends = np.searchsorted(t, t + width, side="right")
    starts = np.arange(len(t))
    before = np.concatenate(([0.0], tokens))[starts]
    load = tokens[ends - 1] - before
    start = int(np.argmax(load))
    end = int(ends[start])
    warm = int(np.searchsorted(t, t[start] - warmup_fraction * duration, side="left"))
    return Window("coarse", items[warm:end], start - warm)
