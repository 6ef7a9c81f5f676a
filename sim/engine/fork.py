"""Cheap exact forks of an engine, to ask "what if this request joined now?" (the clairvoyant policy).

:func:`fork_engine` returns an :class:`Engine` that behaves exactly like ``copy.deepcopy(engine)`` of the
scheduling state — same queue, same running sequences, same KV pool and prefix cache, same step-time noise
stream — but shares everything it only reads with the original:

- sequences (waiting, running, receiving remote KV) are cloned — their counters, their list of held blocks
  while it can still grow, their remote-KV state — with their prompt's block hashes shared and payload dropped;
- the KV pool is a :class:`ForkedPool`, a copy-on-write view: lookups fall through to the original's
  reference counts, LRU and stale blocks, writes stay in the fork. A pod's prefix cache holds tens of
  thousands of blocks; a fork touches a few hundred;
- the step-time model gets its own copy of the random generator, the tables stay shared;
- statistics and the KV ingress link are copied.

The original must not change while a fork is in use (the fork reads its pool and shares block lists).
:func:`first_token_at` runs a fork with :meth:`Engine.advance_until` and no later arrival, stopped at a
sequence's first token.
"""

from __future__ import annotations

import copy
import math
import random
from collections import OrderedDict, deque
from collections.abc import Iterator, Sequence

from sim.engine.engine import Engine
from sim.engine.errors import SimError
from sim.engine.kvcache import BlockPool
from sim.engine.sequence import Sequence as EngineSeq
from sim.engine.steptime import StepTimeModel

_GONE = -1
"""Marks a reference count (or stale count) deleted in the fork."""


class ForkedPool(BlockPool):
    """Copy-on-write view of a :class:`BlockPool` (the base must stay unchanged while the view lives).

    Invariant kept from the base: a hash is in the LRU iff its reference count is 0. The fork's LRU is the
    base's LRU in order without the hashes taken out of it (``_gone``), followed by the hashes freed in the
    fork (``_new``, in the order they were freed); eviction walks the base's LRU once from its front.
    """

    def __init__(self, base: BlockPool) -> None:
        self.num_blocks = base.num_blocks
        self.enable_prefix_caching = base.enable_prefix_caching
        self.free_plain = base.free_plain
        self.evictions = base.evictions
        self._base_refs = base._refs
        self._base_stale = base._stale
        self._refs_delta: dict[int, int] = {}
        self._stale_delta: dict[int, int] = {}
        self._gone: set[int] = set()
        self._new: OrderedDict[int, None] = OrderedDict()
        self._front: Iterator[int] = iter(base._lru)
        self._lru_len = len(base._lru)

    # -- reads ------------------------------------------------------------------------------
    def _ref(self, h: int) -> int | None:
        r = self._refs_delta.get(h)
        if r is None:
            return self._base_refs.get(h)
        return None if r == _GONE else r

    def _stale_count(self, h: int) -> int | None:
        r = self._stale_delta.get(h)
        if r is None:
            return self._base_stale.get(h)
        return None if r == _GONE else r

    @property
    def num_free(self) -> int:
        return self.free_plain + self._lru_len

    @property
    def num_cached(self) -> int:
        added = sum(1 for h, r in self._refs_delta.items() if r != _GONE and h not in self._base_refs)
        removed = sum(1 for h, r in self._refs_delta.items() if r == _GONE and h in self._base_refs)
        return len(self._base_refs) + added - removed

    # -- LRU ---------------------------------------------------------------------------------
    def _lru_remove(self, h: int) -> None:
        if h in self._new:
            del self._new[h]
        else:
            self._gone.add(h)
        self._lru_len -= 1

    def _lru_pop_oldest(self) -> int:
        for h in self._front:
            if h not in self._gone:
                self._gone.add(h)
                self._lru_len -= 1
                return h
        h, _none = self._new.popitem(last=False)
        self._lru_len -= 1
        return h

    # -- the BlockPool operations the scheduler uses ------------------------------------------
    def match_prefix(self, hashes: Sequence[int]) -> tuple[int, int]:
        if not self.enable_prefix_caching:
            return 0, 0
        matched = free = 0
        for h in hashes:
            r = self._ref(h)
            if r is None:
                break
            matched += 1
            if r == 0:
                free += 1
        return matched, free

    def acquire(self, hashes: Sequence[int]) -> None:
        for h in hashes:
            r = self._ref(h)
            if r is None:
                raise KeyError(h)
            if r == 0:
                self._lru_remove(h)
            self._refs_delta[h] = r + 1

    def allocate(self, n: int) -> bool:
        if n > self.num_free:
            return False
        take = min(n, self.free_plain)
        self.free_plain -= take
        rest = n - take
        for _ in range(rest):
            self._refs_delta[self._lru_pop_oldest()] = _GONE
        self.evictions += rest
        return True

    def register(self, h: int) -> bool:
        if not self.enable_prefix_caching or self._ref(h) is not None or self._stale_count(h) is not None:
            return False
        self._refs_delta[h] = 1
        return True

    def release(self, hashed: Sequence[int], n_plain: int) -> None:
        self.free_plain += n_plain
        for h in reversed(hashed):
            r = self._ref(h)
            if r is None:
                self._release_stale(h)
                continue
            r -= 1
            self._refs_delta[h] = r
            if r == 0:
                self._new[h] = None
                self._lru_len += 1

    def _release_stale(self, h: int) -> None:
        count = self._stale_count(h)
        if count is None:
            raise KeyError(h)
        if count > 1:
            self._stale_delta[h] = count - 1
        else:
            self._stale_delta[h] = _GONE
            self.free_plain += 1

    # -- scenario operations are not forked ----------------------------------------------------
    def flush(self) -> None:
        raise SimError("a forked KV pool does not flush")

    def resize(self, num_blocks: int) -> int:
        raise SimError("a forked KV pool does not resize")

    def reclaim(self) -> int:
        raise SimError("a forked KV pool does not reclaim")

    def check(self) -> None:
        assert 0 <= self.free_plain <= self.num_blocks
        assert self._lru_len >= 0


def clone_sequence(seq: EngineSeq) -> EngineSeq:
    """A copy of ``seq``'s engine state (block hashes shared, payload dropped).

    Its list of held cached blocks is shared while the sequence has registered every prompt block: from then on
    the engine only reads that list or replaces it, it never appends to it."""
    out = EngineSeq.__new__(EngineSeq)
    for name in EngineSeq.__slots__:
        setattr(out, name, getattr(seq, name))
    if seq.registered < len(seq.block_hashes):
        out.hashed = list(seq.hashed)
    if seq.remote is not None:
        out.remote = copy.copy(seq.remote)
    out.payload = None
    return out


def fork_step_model(model: StepTimeModel) -> StepTimeModel:
    """The same model with its own copy of the noise generator (tables shared)."""
    out = copy.copy(model)
    out._rng = random.Random(0)
    out._rng.setstate(model._rng.getstate())
    return out


def fork_engine(engine: Engine) -> Engine:
    """An independent engine in ``engine``'s current state (see the module docstring for what is shared)."""
    out = copy.copy(engine)
    out.pool = ForkedPool(engine.pool)
    out.waiting = deque(clone_sequence(s) for s in engine.waiting)
    out.running = [clone_sequence(s) for s in engine.running]
    out.receiving = [clone_sequence(s) for s in engine.receiving]
    out.kv_ingress = copy.copy(engine.kv_ingress)
    out.stats = copy.copy(engine.stats)
    out.step_model = fork_step_model(engine.step_model)
    return out


def first_token_at(engine: Engine, seq: EngineSeq, now: float, give_up_at: float = math.inf,
                   fast_forward: bool = True) -> float:
    """Add ``seq`` to ``engine`` at ``now`` and run until its first token; return that time.

    Runs :meth:`Engine.advance_until` with no later arrival, stopped at the first token (``engine`` is consumed:
    pass a fork). Returns ``math.inf`` when the engine stops before the first token (the request can never be
    scheduled there) or when its clock reaches ``give_up_at`` without one (the first token would come later).
    """
    engine.add(seq, now)
    engine.advance_until(math.inf, fast_forward,
                         stop=lambda: seq.first_token_time is not None or engine.clock >= give_up_at)
    return math.inf if seq.first_token_time is None else seq.first_token_time
