"""Saturation throughput of the engine for a trace's request mix: the rate the loads are fractions of.

**By the profile** (the default of ``sim_fidelity``): the simulator, configured from the measured profile
alone, serves the first ``SATURATION_REQUESTS`` requests of the trace slice all sent at once (vLLM's
``benchmark_serving --request-rate inf``); saturation is their count over the time from the send to the
last completion. With 300 requests the engine stays backlogged (``max_num_seqs`` full, KV pressure) for
most of the run, so the figure is close to the long-run backlogged rate (smaller bursts overstate it: the
short requests finish first). **By a probe** (``--probe``): the same burst on the real engine, same
measure — reported next to the profile's figure as a check, never used to configure the simulator.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench.fidelity.metrics import from_sim, summarize
from bench.fidelity.real import play
from bench.fidelity.workload import Stream, build_stream, burst
from sim.engine.config import EngineConfig
from sim.engine.openloop import run_open_loop

SATURATION_REQUESTS = 300


def saturation_stream(trace: Path, max_model_len: int, start_s: float, seed: int) -> Stream:
    return burst(build_stream(trace, 1.0, SATURATION_REQUESTS, max_model_len, start_s, seed,
                              min_count=SATURATION_REQUESTS))


def sim_saturation_rps(cfg: EngineConfig, frontend_s: float, stream: Stream) -> float:
    results = run_open_loop(cfg, stream.sim_requests(cfg.block_size), frontend_s)
    return summarize(from_sim(results))["throughput_rps"]


def real_saturation_rps(url: str, stream: Stream, vocab: int) -> float:
    outcomes, _late = asyncio.run(play(url, stream, vocab))
    return summarize(outcomes)["throughput_rps"]
