"""One simulated engine under an open-loop request stream, in virtual time (what a client would measure).

Each request is sent at ``arrival_s``; it reaches the scheduler ``frontend_s`` later (HTTP, API server,
IPC: a measured profile's ``frontend_ms``), so TTFT and E2E count it and TPOT does not. The engine is
advanced to each admission time before the request is added, like :mod:`sim.cluster.simulation` does, so a
step never sees a request that arrived after it started.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sim.engine.config import EngineConfig
from sim.engine.engine import Engine
from sim.engine.sequence import Sequence as EngineSequence


@dataclass(frozen=True)
class OpenLoopRequest:
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    block_hashes: tuple[int, ...] = ()


@dataclass(frozen=True)
class OpenLoopResult:
    arrival_s: float
    first_token_s: float
    finish_s: float
    output_tokens: int
    hit_tokens: int

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> float:
        return self.finish_s - self.arrival_s

    @property
    def tpot_s(self) -> float | None:
        n = self.output_tokens
        return None if n < 2 else (self.finish_s - self.first_token_s) / (n - 1)


def run_open_loop(cfg: EngineConfig, requests: Sequence[OpenLoopRequest], frontend_s: float = 0.0,
                  fast_forward: bool = True) -> list[OpenLoopResult]:
    """Serve ``requests`` (sorted by arrival) on one engine; results in request order."""
    engine = Engine(cfg)
    seqs = []
    for i, req in enumerate(requests):
        at = req.arrival_s + frontend_s
        engine.advance_until(at, fast_forward)
        seq = EngineSequence(f"r{i}", req.prompt_tokens, req.output_tokens, req.block_hashes)
        engine.add(seq, at)
        seqs.append(seq)
    engine.advance_until(float("inf"), fast_forward)
    return [_result(req, seq, frontend_s) for req, seq in zip(requests, seqs, strict=True)]


def _result(req: OpenLoopRequest, seq: EngineSequence, frontend_s: float) -> OpenLoopResult:
    if seq.first_token_time is None or seq.finish_time is None:
        raise RuntimeError(f"request {seq.request_id} did not finish")
    return OpenLoopResult(req.arrival_s, seq.first_token_time, seq.finish_time, seq.num_output,
                          seq.first_hit_tokens or 0)
