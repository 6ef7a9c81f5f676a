"""Closed-form jump over a run of pure-decode steps (cluster replay speed-up).

When every running sequence is decoding (one token per step) and nothing can join the batch,
consecutive steps differ only by one cached token per sequence: step ``j`` lasts ``a + b*j`` ms
(:meth:`StepTimeModel.decode_run`). The run ends when the shortest sequence finishes, when the
KV pool cannot grow any more, or at the caller's horizon ``t`` (the next arrival). We apply the
whole run at once: counters advance by ``k`` tokens, blocks are allocated in one go, the run's
noise is one draw with ``sigma / sqrt(k)``. Token timestamps inside the run are not materialised
(replay only needs first-token and finish times, neither of which can fall inside a run).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Protocol

from sim.engine.config import EngineConfig
from sim.engine.kv_transfer import can_allocate
from sim.engine.kvcache import BlockPool
from sim.engine.sequence import FINISHED, Event, Sequence
from sim.engine.steptime import StepTimeModel


class EngineState(Protocol):
    """What a decode jump reads and updates on an engine (:class:`sim.engine.engine.Engine`)."""

    cfg: EngineConfig
    block_size: int
    pool: BlockPool
    step_model: StepTimeModel
    waiting: deque[Sequence]
    running: list[Sequence]
    clock: float

    def record_busy(self, dur: float, tokens: int, steps: int) -> None: ...

    def finish_sequences(self, done: list[Sequence], end: float) -> None: ...


def _head_can_join(engine: EngineState, batch: int) -> bool:
    if not engine.waiting or batch >= engine.cfg.max_num_seqs:
        return False
    seq = engine.waiting[0]
    if seq.remote is not None:  # disaggregated: it joins once its KV is here, or its blocks get allocated now
        return seq.remote.allocated_s is not None or can_allocate(engine, seq)
    bs = engine.block_size
    matched, free_matched = engine.pool.match_prefix(seq.block_hashes[: (seq.length - 1) // bs])
    budget = engine.cfg.max_num_batched_tokens - batch
    n = min(seq.length - matched * bs, budget)
    need = (matched * bs + n + bs - 1) // bs - matched
    return need + free_matched <= engine.pool.num_free


def _blocks_needed(engine: EngineState, k: int) -> int:
    bs = engine.block_size
    return sum((s.num_computed + k + bs - 1) // bs - len(s.hashed) - s.n_plain for s in engine.running)


def _max_steps_for_blocks(engine: EngineState, k_max: int) -> int:
    free = engine.pool.num_free
    bs = engine.block_size
    if free >= len(engine.running) * -(-k_max // bs):  # each sequence needs <= ceil(k / bs) blocks
        return k_max
    if _blocks_needed(engine, k_max) <= free:
        return k_max
    lo, hi = 0, k_max
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _blocks_needed(engine, mid) <= free:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _steps_before(a: float, b: float, horizon_ms: float, k_max: int) -> int:
    """Number of steps ``j`` whose start ``j*a + b*j*(j-1)/2`` lies before ``horizon_ms``."""
    if math.isinf(horizon_ms):
        return k_max
    if b <= 0.0:
        root = horizon_ms / a
    else:
        lin = a - b / 2.0
        root = (-lin + math.sqrt(lin * lin + 2.0 * b * horizon_ms)) / b
    return max(1, min(k_max, math.ceil(root)))


def try_decode_jump(engine: EngineState, t: float, events: list[Event]) -> bool:
    """Apply a decode run starting now and ending before/at horizon ``t``; False if not applicable."""
    running = engine.running
    batch = len(running)
    k_max = 1 << 30
    kv_sum = 0
    for s in running:
        if s.prompt_len + s.num_output - s.num_computed != 1 or s.num_output == 0:
            return False
        left = s.output_len - s.num_output
        if left < k_max:
            k_max = left
        kv_sum += s.num_computed + 1
    if batch > engine.cfg.max_num_batched_tokens or _head_can_join(engine, batch):
        return False
    k_max = _max_steps_for_blocks(engine, k_max)
    if k_max < 1:
        return False
    model = engine.step_model
    unique = engine.pool.unique_kv(engine.block_size, kv_sum) if model.reads_unique_kv else None
    a, b = model.decode_run(batch, kv_sum, unique)
    k = _steps_before(a, b, (t - engine.clock) * 1e3, k_max)
    dur = (k * a + b * k * (k - 1) / 2.0) * engine.step_model.noise(k) / 1e3
    _apply(engine, k, dur, events)
    return True


def _apply(engine: EngineState, k: int, dur: float, events: list[Event]) -> None:
    bs = engine.block_size
    total_new = 0
    done = []
    for s in engine.running:
        need = (s.num_computed + k + bs - 1) // bs - len(s.hashed) - s.n_plain
        s.n_plain += need
        total_new += need
        s.num_computed += k
        s.num_output += k
        if s.num_output >= s.output_len:
            done.append(s)
    engine.pool.allocate(total_new)
    engine.record_busy(dur, k * len(engine.running), k)
    end = engine.clock + dur
    engine.clock = end
    if done:
        for s in done:
            events.append((end, FINISHED, s))
        engine.finish_sequences(done, end)
