"""Paged KV-cache block pool with vLLM-style automatic prefix caching.

A block is either *plain* (owned by one sequence, no hash yet) or *cached* (full prompt block
identified by its chained hash, reference-counted). Cached blocks whose reference count drops to
zero stay in an LRU list and keep their contents until the space is needed; a later request with
the same prefix hash takes them back without recomputing. Only counts are tracked, not contents.

Scenario operations: :meth:`BlockPool.flush` forgets every cached prefix (blocks in use keep serving
their sequences as *stale* blocks that match nothing and are freed as plain blocks);
:meth:`BlockPool.resize` changes the capacity (the engine preempts if a shrink leaves a deficit).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class BlockPool:
    def __init__(self, num_blocks: int, enable_prefix_caching: bool = True) -> None:
        self.num_blocks = num_blocks
        self.enable_prefix_caching = enable_prefix_caching
        self.free_plain = num_blocks
        self._refs: dict[int, int] = {}
        self._lru: OrderedDict[int, None] = OrderedDict()
        self._stale: dict[int, int] = {}
        """In-use blocks whose hash was forgotten by :meth:`flush` (hash -> reference count)."""
        self.evictions = 0

    @property
    def num_free(self) -> int:
        return self.free_plain + len(self._lru)

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    @property
    def usage(self) -> float:
        return self.num_used / self.num_blocks

    def unique_kv(self, block_size: int, decode_kv: int) -> int:
        """Distinct cached tokens a step's decodes read, at most ``decode_kv``: the blocks in use (a block
        shared by several running sequences counts once)."""
        return min(decode_kv, self.num_used * block_size)

    @property
    def num_cached(self) -> int:
        """Blocks holding a prefix hash (in use or free-but-cached)."""
        return len(self._refs)

    def match_prefix(self, hashes: Sequence[int]) -> tuple[int, int]:
        """Return ``(matched_blocks, of_which_free)`` for the longest cached prefix of ``hashes``."""
        if not self.enable_prefix_caching:
            return 0, 0
        refs = self._refs
        matched = free = 0
        for h in hashes:
            r = refs.get(h)
            if r is None:
                break
            matched += 1
            if r == 0:
                free += 1
        return matched, free

    def acquire(self, hashes: Sequence[int]) -> None:
        """Take a reference on cached blocks (all must be present, see :meth:`match_prefix`)."""
        refs, lru = self._refs, self._lru
        for h in hashes:
            r = refs[h]
            if r == 0:
                del lru[h]
            refs[h] = r + 1

    def allocate(self, n: int) -> bool:
        """Allocate ``n`` plain blocks, evicting least-recently-freed cached blocks if needed."""
        if n > self.num_free:
            return False
        take = min(n, self.free_plain)
        self.free_plain -= take
        rest = n - take
        if rest:
            lru, refs = self._lru, self._refs
            for _ in range(rest):
                h, _none = lru.popitem(last=False)
                del refs[h]
            self.evictions += rest
        return True

    def register(self, h: int) -> bool:
        """Turn one of the caller's plain blocks into the cached block ``h``.

        Returns False (the block stays plain) when caching is off or an identical block exists.
        """
        if not self.enable_prefix_caching or h in self._refs or h in self._stale:
            return False
        self._refs[h] = 1
        return True

    def release(self, hashed: Sequence[int], n_plain: int) -> None:
        """Free a sequence's blocks; tail blocks become the first eviction candidates (as vLLM)."""
        self.free_plain += n_plain
        refs, lru = self._refs, self._lru
        for h in reversed(hashed):
            r = refs.get(h)
            if r is None:
                self._release_stale(h)
                continue
            r -= 1
            refs[h] = r
            if r == 0:
                lru[h] = None

    def _release_stale(self, h: int) -> None:
        r = self._stale[h] - 1
        if r:
            self._stale[h] = r
        else:
            del self._stale[h]
            self.free_plain += 1

    def flush(self) -> None:
        """Forget every cached prefix (like vLLM's ``reset_prefix_cache``, but also while busy)."""
        for h in self._lru:
            del self._refs[h]
        self.free_plain += len(self._lru)
        self._lru.clear()
        for h, r in self._refs.items():
            self._stale[h] = self._stale.get(h, 0) + r
        self._refs.clear()

    def resize(self, num_blocks: int) -> int:
        """Set the capacity to ``num_blocks``, evicting free cached blocks if it shrinks.

        Returns the blocks still missing (held by running sequences): the caller must free them.
        """
        self.free_plain += num_blocks - self.num_blocks
        self.num_blocks = num_blocks
        return self.reclaim()

    def reclaim(self) -> int:
        """Evict free cached blocks while plain blocks are in deficit; return the remaining deficit."""
        lru, refs = self._lru, self._refs
        while self.free_plain < 0 and lru:
            h, _none = lru.popitem(last=False)
            del refs[h]
            self.free_plain += 1
            self.evictions += 1
        return max(0, -self.free_plain)

    def check(self) -> None:
        """Internal consistency (used by tests)."""
        assert 0 <= self.free_plain <= self.num_blocks
        assert all(r >= 0 for r in self._refs.values())
        assert all(self._refs[h] == 0 for h in self._lru)
        in_use_cached = sum(1 for r in self._refs.values() if r > 0)
        assert all(r > 0 for r in self._stale.values())
        assert not set(self._stale) & set(self._refs)
        assert self.free_plain + len(self._lru) + in_use_cached + len(self._stale) <= self.num_blocks
