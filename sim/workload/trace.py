"""Trace files: ``arrived_at,num_prefill_tokens,num_decode_tokens`` (Azure LLM inference 2023)."""

from __future__ import annotations

import csv
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sim.engine.errors import ConfigError


@dataclass(frozen=True)
class TraceRequest:
    request_id: str
    arrival_s: float
    prompt_tokens: int
    output_tokens: int


def load_trace(
    path: Path,
    rate_scale: float = 1.0,
    limit: int | None = None,
    duration_s: float | None = None,
    start_s: float = 0.0,
) -> list[TraceRequest]:
    """Load a trace, optionally slicing it; arrivals are divided by ``rate_scale`` and start at 0.

    ``start_s`` / ``duration_s`` are in the trace's original time; ``limit`` caps the row count.
    """
    if rate_scale <= 0:
        raise ConfigError("rate_scale must be > 0")
    if not path.is_file():
        raise ConfigError(f"trace not found: {path}")
    out: list[TraceRequest] = []
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            t = float(row["arrived_at"])
            if t < start_s:
                continue
            if duration_s is not None and t >= start_s + duration_s:
                break
            prompt = max(1, int(row["num_prefill_tokens"]))
            output = max(1, int(row["num_decode_tokens"]))
            out.append(TraceRequest(f"r{len(out)}", (t - start_s) / rate_scale, prompt, output))
            if limit is not None and len(out) >= limit:
                break
    return out


def output_length_sampler(path: Path | None, seed: int = 0) -> Callable[[], int]:
    """Draw output lengths from a trace's empirical distribution (lognormal fallback, median 129)."""
    rng = random.Random(seed)
    lengths: list[int] = []
    if path is not None and path.is_file():
        with path.open(newline="") as fh:
            lengths = [max(1, int(r["num_decode_tokens"])) for r in csv.DictReader(fh)]
    if lengths:
        return lambda: lengths[rng.randrange(len(lengths))]
    return lambda: max(1, min(2048, int(rng.lognormvariate(4.86, 0.9))))
