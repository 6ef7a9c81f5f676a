"""One simulated vLLM pod: V1-style scheduler (decode first, chunked prefill, token budget),
paged KV cache with prefix caching and preemption by recompute, driven by :class:`StepTimeModel`.

Two ways to drive it, same rules: :meth:`Engine.step` runs exactly one step (pod servers pace
SSE chunks with it); :meth:`Engine.advance_until` runs steps until a virtual time and jumps over
runs of pure-decode steps in closed form (cluster replay), see :mod:`sim.engine.fastforward`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from sim.engine.config import EngineConfig
from sim.engine.errors import PodFailed, PromptTooLong, SimError
from sim.engine.fastforward import try_decode_jump
from sim.engine.kv_transfer import IngressLink, RemoteKV, loaded, start_transfer
from sim.engine.kvcache import BlockPool
from sim.engine.sequence import FINISHED, FIRST_TOKEN, Event, Sequence
from sim.engine.steptime import StepTimeModel

__all__ = ["FINISHED", "FIRST_TOKEN", "Engine", "EngineStats", "Event", "StepResult"]


@dataclass
class StepResult:
    start: float
    end: float
    emitted: list[Sequence] = field(default_factory=list)
    """Sequences that produced one token in this step."""
    finished: list[Sequence] = field(default_factory=list)


@dataclass
class EngineStats:
    steps: int = 0
    busy_s: float = 0.0
    kv_usage_integral: float = 0.0
    """Integral of KV usage over busy time (divide by elapsed time for a mean)."""
    max_kv_usage: float = 0.0
    tokens_computed: int = 0
    preemptions: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    admitted: int = 0
    finished: int = 0


class Engine:
    def __init__(self, cfg: EngineConfig, step_model: StepTimeModel | None = None) -> None:
        self.cfg = cfg
        self.block_size = cfg.block_size
        self.step_model = step_model or StepTimeModel(cfg)
        self.pool = BlockPool(cfg.num_gpu_blocks, cfg.enable_prefix_caching)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.clock = 0.0
        self.stats = EngineStats()
        self.failed = False
        """Set by a scenario's ``fail`` event: the pod takes no requests until ``restore``."""
        self.receiving: list[Sequence] = []
        """Disaggregated requests holding KV blocks while their prompt KV arrives (:mod:`sim.engine.kv_transfer`)."""
        self.kv_ingress: IngressLink | None = None
        """The link prompt KV arrives over; set on pods that take disaggregated requests (:meth:`add_remote`)."""

    # -- admission ---------------------------------------------------------------------------
    def check_fits(self, prompt_len: int, requested_output: int = 0) -> None:
        """Raise :class:`PromptTooLong` like vLLM's OpenAI server does."""
        limit = self.cfg.max_model_len
        if prompt_len >= limit or prompt_len + max(requested_output, 0) > limit:
            raise PromptTooLong(prompt_len, requested_output, self.cfg.max_model_len)

    def add(self, seq: Sequence, now: float) -> None:
        """Queue ``seq`` at time ``now``; output is clipped so the sequence fits ``max_model_len``."""
        if self.failed:
            raise PodFailed()
        self.check_fits(seq.prompt_len)
        seq.output_len = min(seq.output_len, self.cfg.max_model_len - seq.prompt_len)
        if not self.running and not self.waiting:
            self.clock = max(self.clock, now)
        seq.arrival = now
        self.waiting.append(seq)

    def add_remote(self, seq: Sequence, now: float, remote: RemoteKV) -> None:
        """Queue a disaggregated request whose prompt was prefilled elsewhere: its KV is pulled over
        :attr:`kv_ingress` once the scheduler has blocks for it (:mod:`sim.engine.kv_transfer`)."""
        if self.kv_ingress is None:
            raise SimError("this engine has no KV ingress link: it cannot take disaggregated requests")
        remote.queued_s = now
        seq.remote = remote
        self.add(seq, now)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting or self.receiving)

    @property
    def num_waiting(self) -> int:
        """``vllm:num_requests_waiting``: queued requests, those waiting for remote KV included."""
        return len(self.waiting) + len(self.receiving)

    def next_wake(self) -> float:
        """When the next transfer into this engine completes (``inf``: none in flight)."""
        return min((s.remote.ready_s for s in self.receiving), default=math.inf)

    @property
    def kv_usage(self) -> float:
        return self.pool.usage

    def abort(self, seq: Sequence) -> None:
        """Drop a request (client went away): free its blocks, no further tokens."""
        if seq.finished:
            return
        if seq in self.waiting:
            self.waiting.remove(seq)
        elif seq in self.receiving:
            self.receiving.remove(seq)
        elif seq in self.running:
            self.running.remove(seq)
        self.pool.release(seq.hashed, seq.n_plain)
        seq.hashed, seq.n_plain = [], 0
        seq.finished = True
        seq.finish_time = self.clock

    # -- scenario operations ------------------------------------------------------------------
    def fail(self, now: float) -> list[Sequence]:
        """The pod crashes at ``now``: every queued and running request is lost (returned), and so
        is the KV cache content (the pool restarts empty); no admission until :meth:`restore`."""
        lost = [*self.running, *self.waiting, *self.receiving]
        for seq in lost:
            seq.finished = True
            seq.finish_time = now
            seq.hashed, seq.n_plain = [], 0
        self.running = []
        self.waiting.clear()
        self.receiving = []
        self.pool = BlockPool(self.pool.num_blocks, self.cfg.enable_prefix_caching)
        self.clock = max(self.clock, now)
        self.failed = True
        return lost

    def restore(self, now: float) -> None:
        """The pod is back (empty cache, same speed factor and KV capacity as before the failure)."""
        self.failed = False
        self.clock = max(self.clock, now)

    def resize_kv(self, num_blocks: int) -> None:
        """Change the KV capacity; a shrink below current use preempts the newest running sequences."""
        self.pool.resize(num_blocks)
        while self.pool.reclaim() > 0 and self.running:
            self._preempt(self.running.pop())

    # -- one step ----------------------------------------------------------------------------
    def step(self) -> StepResult | None:
        """Schedule and execute one step; None when there is nothing to run."""
        seqs, counts = self._schedule()
        if not seqs:
            return None
        return self._execute(seqs, counts)

    def advance_until(self, t: float, fast_forward: bool = True,
                      stop: Callable[[], bool] | None = None) -> list[Event]:
        """Run every step that starts before ``t``; return first-token / finish events. ``stop`` (asked
        before every step or decode run) ends the advance early without changing the steps taken before."""
        events: list[Event] = []
        while self.has_work() and self.clock < t and (stop is None or not stop()):
            if self.receiving:
                self._collect_loaded()
            if fast_forward and self.running and try_decode_jump(self, min(t, self.next_wake()), events):
                continue
            res = self.step()
            if res is None:
                wake = self.next_wake()
                if wake <= self.clock or wake >= t:
                    break
                self.clock = wake
                continue
            for seq in res.emitted:
                if seq.num_output == 1:
                    events.append((res.end, FIRST_TOKEN, seq))
            for seq in res.finished:
                events.append((res.end, FINISHED, seq))
        return events

    # -- scheduling --------------------------------------------------------------------------
    def _schedule(self) -> tuple[list[Sequence], list[int]]:
        if self.receiving:
            self._collect_loaded()
        budget = self.cfg.max_num_batched_tokens
        bs = self.block_size
        seqs: list[Sequence] = []
        counts: list[int] = []
        running = self.running
        preempted = False
        i = 0
        while i < len(running) and budget > 0:
            seq = running[i]
            n = min(seq.prompt_len + seq.num_output - seq.num_computed, budget)
            need = (seq.num_computed + n + bs - 1) // bs - len(seq.hashed) - seq.n_plain
            if need > 0:
                if self.pool.num_free < need:
                    preempted = True
                    if not self._preempt_for(need, i):
                        break
                self.pool.allocate(need)
                seq.n_plain += need
            seqs.append(seq)
            counts.append(n)
            budget -= n
            i += 1
        if not preempted:
            budget = self._admit_waiting(budget, seqs, counts)
        return seqs, counts

    def _preempt_for(self, need: int, index: int) -> bool:
        """Preempt from the tail of ``running`` until ``need`` blocks are free.

        Returns False if the sequence at ``index`` itself had to be preempted.
        """
        running = self.running
        while self.pool.num_free < need:
            victim = running.pop()
            self._preempt(victim)
            if len(running) == index:
                return False
        return True

    def _preempt(self, seq: Sequence) -> None:
        self.pool.release(seq.hashed, seq.n_plain)
        seq.hashed = []
        seq.n_plain = 0
        seq.registered = 0
        seq.num_computed = 0
        seq.preemptions += 1
        self.stats.preemptions += 1
        self.waiting.appendleft(seq)

    def _admit_waiting(self, budget: int, seqs: list[Sequence], counts: list[int]) -> int:
        bs = self.block_size
        pool = self.pool
        while self.waiting and budget > 0 and len(self.running) < self.cfg.max_num_seqs:
            seq = self.waiting[0]
            if seq.remote is not None:
                taken = self._admit_remote(seq, seqs, counts)
                if taken is None:
                    break
                budget -= taken
                continue
            limit = (seq.length - 1) // bs
            matched, free_matched = pool.match_prefix(seq.block_hashes[:limit])
            hit_tokens = matched * bs
            n = min(seq.length - hit_tokens, budget)
            need = (hit_tokens + n + bs - 1) // bs - matched
            if need + free_matched > pool.num_free:
                break
            self.waiting.popleft()
            hit_hashes = list(seq.block_hashes[:matched])
            pool.acquire(hit_hashes)
            pool.allocate(need)
            seq.hashed = hit_hashes
            seq.n_plain = need
            seq.registered = matched
            seq.num_computed = hit_tokens
            seq.hit_tokens += hit_tokens
            if seq.first_hit_tokens is None:
                seq.first_hit_tokens = hit_tokens
                self.stats.admitted += 1
            seq.admitted = True
            self.stats.prefix_queries += seq.prompt_len
            self.stats.prefix_hits += hit_tokens
            self.running.append(seq)
            seqs.append(seq)
            counts.append(n)
            budget -= n
        return budget

    def _admit_remote(self, seq: Sequence, seqs: list[Sequence], counts: list[int]) -> int | None:
        """Head of the queue is disaggregated: allocate its blocks and start the transfer (0 tokens), or, once
        its KV is here, run it (1 token: the last prompt token); None when its blocks are not free."""
        remote: RemoteKV = seq.remote
        if remote.allocated_s is None:
            if self.kv_ingress is None or not start_transfer(self, seq, remote, self.kv_ingress):
                return None
            self.waiting.popleft()
            self.receiving.append(seq)
            return 0
        self.waiting.popleft()
        seq.remote = None
        seq.admitted = True
        self.stats.admitted += 1
        self.running.append(seq)
        seqs.append(seq)
        counts.append(1)
        return 1

    def _collect_loaded(self) -> None:
        """Requests whose KV has arrived by now go back to the front of the queue, in arrival order."""
        clock = self.clock
        done = [s for s in self.receiving if s.remote.ready_s <= clock]
        if not done:
            return
        self.receiving = [s for s in self.receiving if s.remote.ready_s > clock]
        for seq in sorted(done, key=lambda s: s.remote.ready_s, reverse=True):
            loaded(seq)
            self.waiting.appendleft(seq)

    # -- execution ---------------------------------------------------------------------------
    def _execute(self, seqs: list[Sequence], counts: list[int]) -> StepResult:
        prefill_qk = 0.0
        decode_kv = 0
        tokens = 0
        for seq, n in zip(seqs, counts, strict=True):
            tokens += n
            if n == 1:
                decode_kv += seq.num_computed + 1
            else:
                prefill_qk += n * (seq.num_computed + n / 2.0)
        model = self.step_model
        unique = self.pool.unique_kv(self.block_size, decode_kv) if model.reads_unique_kv else None
        dur = model.step_seconds(tokens, len(seqs), prefill_qk, decode_kv, unique)
        start = self.clock
        end = start + dur
        self.record_busy(dur, tokens, 1)
        res = StepResult(start, end)
        for seq, n in zip(seqs, counts, strict=True):
            seq.num_computed += n
            if seq.registered < len(seq.block_hashes):
                self._register_blocks(seq)
            if seq.num_computed == seq.prompt_len + seq.num_output:
                seq.num_output += 1
                res.emitted.append(seq)
                if seq.first_token_time is None:
                    seq.first_token_time = end
                if seq.num_output >= seq.output_len:
                    res.finished.append(seq)
        self.clock = end
        if res.finished:
            self.finish_sequences(res.finished, end)
        return res

    def record_busy(self, dur: float, tokens: int, steps: int) -> None:
        st = self.stats
        usage = self.pool.usage
        st.steps += steps
        st.busy_s += dur
        st.kv_usage_integral += usage * dur
        st.tokens_computed += tokens
        if usage > st.max_kv_usage:
            st.max_kv_usage = usage

    def _register_blocks(self, seq: Sequence) -> None:
        full = min(min(seq.num_computed, seq.prompt_len) // self.block_size, len(seq.block_hashes))
        pool = self.pool
        for j in range(seq.registered, full):
            h = seq.block_hashes[j]
            if pool.register(h):
                seq.hashed.append(h)
                seq.n_plain -= 1
        if full > seq.registered:
            seq.registered = full

    def finish_sequences(self, done: list[Sequence], end: float) -> None:
        for seq in done:
            seq.finish_time = end
            seq.finished = True
            self.pool.release(seq.hashed, seq.n_plain)
            seq.hashed = []
            seq.n_plain = 0
        self.stats.finished += len(done)
        self.running = [s for s in self.running if not s.finished]
