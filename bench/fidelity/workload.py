"""The request stream of a fidelity run: one trace slice, at a target rate, for the engine and the simulator.

The first ``count`` requests of the trace from ``start_s`` keep their arrival pattern, rescaled so the mean
rate is ``rate_rps``; prompts and outputs are clipped to the context (:func:`sim.workload.tokens.token_requests`,
which also gives every request the simulator's session / shared-prefix block hashes). The engine gets token
ids built from those hashes (16-token blocks); the simulator gets the same hashes regrouped into the engine's
block size (:func:`sim.workload.blocks.coarse_block_hashes`), so both prefix caches see the same sharing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

from sim.engine.openloop import OpenLoopRequest
from sim.workload.blocks import coarse_block_hashes
from sim.workload.sessions import SessionModelConfig
from sim.workload.tokens import TokenRequest, token_requests
from sim.workload.trace import load_trace

WORKLOAD_BLOCK = SessionModelConfig().block_size


@dataclass(frozen=True)
class Stream:
    rate_rps: float
    requests: tuple[TokenRequest, ...]

    @property
    def span_s(self) -> float:
        return self.requests[-1].arrival_s if self.requests else 0.0

    def sim_requests(self, engine_block: int) -> list[OpenLoopRequest]:
        return [OpenLoopRequest(r.arrival_s, r.prompt_tokens, r.output_tokens,
                                coarse_block_hashes(r.hashes, WORKLOAD_BLOCK, engine_block)) for r in self.requests]


def build_stream(trace: Path, rate_rps: float, duration_s: float, max_model_len: int, start_s: float = 0.0,
                 seed: int = 0, min_count: int = 20) -> Stream:
    """About ``duration_s`` of arrivals at ``rate_rps`` (at least ``min_count`` requests)."""
    count = max(min_count, math.ceil(rate_rps * duration_s))
    rows = load_trace(trace, limit=count, start_s=start_s)
    reqs = token_requests(rows, max_model_len, seed)
    if len(reqs) < 2:
        raise ValueError(f"trace slice from {start_s} s has {len(reqs)} requests")
    trace_rate = (len(reqs) - 1) / max(reqs[-1].arrival_s - reqs[0].arrival_s, 1e-9)
    factor = trace_rate / rate_rps
    t0 = reqs[0].arrival_s
    return Stream(rate_rps, tuple(replace(r, arrival_s=(r.arrival_s - t0) * factor) for r in reqs))


def burst(stream: Stream) -> Stream:
    """The same requests all arriving at once (a saturation probe)."""
    return Stream(math.inf, tuple(replace(r, arrival_s=0.0) for r in stream.requests))
