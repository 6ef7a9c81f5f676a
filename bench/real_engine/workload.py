"""The trace as token-id requests for the engines: arrivals rescaled (by a factor or to a mean rate), lengths
kept, the simulator's prefix structure, prompts clipped to the context (counted).

``--rps R`` rescales the replayed window itself: the first ``round(R × S)`` arrivals from ``start`` are spread
over the ``S`` seconds of a policy's run (the factor is set so that exactly they arrive within it), so the
offered rate is R however bursty that part of the trace is.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from demo.workload import DemoRequest, TokenWorkload, load_trace


@dataclass(frozen=True)
class Workload:
    requests: list[DemoRequest]
    rate_scale: float
    duration_s: float
    clipped: int
    """Requests whose prompt (+ output) did not fit the context and were cut to fit."""

    @property
    def offered_rps(self) -> float:
        return len(self.requests) / self.duration_s


def arrivals(path: Path, start_s: float = 0.0) -> list[float]:
    with path.open(newline="") as fh:
        return [t for t in (float(row["arrived_at"]) for row in csv.DictReader(fh)) if t >= start_s]


def scale_for_rate(times: list[float], rps: float, duration_s: float, start_s: float = 0.0) -> float:
    """The rate scale that puts exactly ``round(rps × duration_s)`` of ``times`` (from ``start_s``) in the run."""
    n = max(1, round(rps * duration_s))
    if n >= len(times):
        raise ValueError(f"the trace has {len(times)} arrivals after {start_s:g} s; {n} are needed")
    span = times[n] - start_s
    if span <= 0:
        raise ValueError(f"arrivals {n} and the start coincide at {start_s:g} s")
    return span / duration_s


def build(path: Path, duration_s: float, rate_scale: float | None, rps: float | None, max_model_len: int,
          vocab: int, seed: int = 0, start_s: float = 0.0) -> Workload:
    """The requests arriving within ``duration_s`` wall seconds of the rescaled trace (from ``start_s``)."""
    if rps is not None:
        rate_scale = scale_for_rate(arrivals(path, start_s), rps, duration_s, start_s)
    if rate_scale is None:
        raise ValueError("give a rate scale or a target rate")
    rows = load_trace(path, rate_scale, duration_s, start_s)
    tokens = TokenWorkload(seed, max_model_len=max_model_len, vocab=vocab)
    requests = list(tokens.requests(rows))
    return Workload(requests, rate_scale, duration_s, tokens.clipped)
