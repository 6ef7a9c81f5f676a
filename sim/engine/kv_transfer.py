"""KV cache transfer into a decode pod (prefill/decode disaggregation), as vLLM's NIXL connector does it.

A disaggregated request reaches the decode engine after a prefill pod computed its prompt (llm-d's sidecar
asked the prefill engine for one token, ``max_tokens: 1``). The decode engine queues it like any request;
when it reaches the head of the waiting queue the scheduler allocates KV blocks for the whole prompt — the
blocks its own prefix cache already holds are reused, only the rest is pulled from the prefill pod. If the
blocks are not free the request waits there (FCFS, like every other waiting request). Once allocated, the
transfer starts: ``bytes = tokens x KV bytes per token`` over the pod's ingress link. Transfers into one
decode pod share its link first come, first served (one at a time at the full bandwidth), each taking
``bytes / bandwidth + latency``. When it completes, the request rejoins the front of the waiting queue with
``prompt - 1`` tokens computed: its first decode step recomputes the last prompt token and samples the first
output token (vLLM recomputes the last token of a fully loaded prompt), then it decodes as usual.

The blocks held during the transfer count as used KV (``kv_cache_usage``) and the request counts as waiting
(``num_requests_waiting``), as in vLLM, where it sits in the waiting queue in ``WAITING_FOR_REMOTE_KVS``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from sim.engine.config import EngineConfig
from sim.engine.kvcache import BlockPool
from sim.engine.sequence import Sequence


class _Stats(Protocol):
    prefix_queries: int
    prefix_hits: int


class Blocks(Protocol):
    block_size: int
    pool: BlockPool


class Engine(Blocks, Protocol):
    """What a transfer reads and updates on an engine (:class:`sim.engine.engine.Engine`)."""

    cfg: EngineConfig
    clock: float

    @property
    def stats(self) -> _Stats: ...

BITS_PER_BYTE = 8


@dataclass(frozen=True)
class KVLink:
    """The link a decode pod pulls KV over: ``gbps`` per GPU (one NIC each), ``latency_ms`` per transfer."""

    gbps: float = 100.0
    latency_ms: float = 1.0

    def __post_init__(self) -> None:
        if not (self.gbps > 0 and math.isfinite(self.gbps)) or not self.latency_ms >= 0:
            raise ValueError(f"KV link needs gbps > 0 and latency_ms >= 0, got {self.gbps}, {self.latency_ms}")

    def busy_s(self, nbytes: float, lanes: int = 1) -> float:
        """Seconds the link is busy moving ``nbytes`` over ``lanes`` NICs in parallel."""
        return nbytes * BITS_PER_BYTE / (self.gbps * 1e9 * lanes)

    def seconds(self, nbytes: float, lanes: int = 1) -> float:
        """Transfer time of ``nbytes`` on an idle link: ``bytes / bandwidth + latency``."""
        return self.busy_s(nbytes, lanes) + self.latency_ms / 1e3


class IngressLink:
    """One decode pod's ingress: transfers run one after another at the link's full bandwidth."""

    def __init__(self, link: KVLink) -> None:
        self.link = link
        self.free_at = -math.inf

    def schedule(self, now: float, nbytes: float, lanes: int) -> float:
        """Start a transfer requested at ``now``; return when its last byte has arrived."""
        start = max(now, self.free_at)
        busy = self.link.busy_s(nbytes, lanes)
        self.free_at = start + busy
        return start + busy + self.link.latency_ms / 1e3


@dataclass
class RemoteKV:
    """Decode-side state of one disaggregated request (shared with the cluster replay, which reports it)."""

    lanes: int = 1
    """NICs the transfer runs over in parallel: min(TP of the prefill pod, TP of the decode pod)."""
    queued_s: float = 0.0
    """When the request reached the decode engine."""
    allocated_s: float | None = None
    """When its KV blocks were allocated (the transfer was requested)."""
    ready_s: float | None = None
    """When the last byte arrived."""
    tokens: int = 0
    """Prompt tokens pulled from the prefill pod (the decode pod's own prefix-cache hit is not sent)."""
    nbytes: float = 0.0

    @property
    def transfer_s(self) -> float | None:
        """From the block allocation to the last byte (link queueing + bytes / bandwidth + latency)."""
        if self.allocated_s is None or self.ready_s is None:
            return None
        return self.ready_s - self.allocated_s

    @property
    def block_wait_s(self) -> float | None:
        """From reaching the decode engine to the block allocation (waiting in the queue / for free blocks)."""
        return None if self.allocated_s is None else self.allocated_s - self.queued_s


def blocks_for(engine: Blocks, seq: Sequence) -> tuple[int, int, int]:
    """``(matched, free_matched, need)``: the decode pod's cached prefix of ``seq`` and the blocks to add."""
    bs = engine.block_size
    matched, free_matched = engine.pool.match_prefix(seq.block_hashes[: (seq.prompt_len - 1) // bs])
    return matched, free_matched, -(-seq.prompt_len // bs) - matched


def can_allocate(engine: Blocks, seq: Sequence) -> bool:
    _, free_matched, need = blocks_for(engine, seq)
    return need + free_matched <= engine.pool.num_free


def start_transfer(engine: Engine, seq: Sequence, remote: RemoteKV, ingress: IngressLink) -> bool:
    """Allocate ``seq``'s blocks at the engine's clock and schedule its transfer; False if they are not free."""
    matched, free_matched, need = blocks_for(engine, seq)
    pool = engine.pool
    if need + free_matched > pool.num_free:
        return False
    hit = list(seq.block_hashes[:matched])
    pool.acquire(hit)
    pool.allocate(need)
    hit_tokens = matched * engine.block_size
    seq.hashed, seq.n_plain, seq.registered, seq.num_computed = hit, need, matched, hit_tokens
    seq.hit_tokens += hit_tokens
    seq.first_hit_tokens = hit_tokens
    engine.stats.prefix_queries += seq.prompt_len
    engine.stats.prefix_hits += hit_tokens
    remote.allocated_s = engine.clock
    remote.tokens = seq.prompt_len - hit_tokens
    remote.nbytes = remote.tokens * engine.cfg.model.kv_bytes_per_token
    remote.ready_s = ingress.schedule(engine.clock, remote.nbytes, remote.lanes)
    return True


def loaded(seq: Sequence) -> None:
    """The KV has arrived: everything but the last prompt token counts as computed (the request keeps its
    :class:`RemoteKV` until the scheduler admits it, which then needs no blocks and one token of budget)."""
    seq.num_computed = seq.prompt_len - 1
