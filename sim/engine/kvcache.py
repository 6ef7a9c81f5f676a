"""Paged KV-cache block pool with vLLM-style automatic prefix caching.

A block is either *plain* (owned by one sequence, no hash yet) or *cached* (full prompt block
identified by its chained hash, reference-counted). Cached blocks whose reference count drops to
zero stay in an LRU list and keep their contents until the space is needed; a later request with
the same prefix hash takes them back without recomputing. Only counts are tracked, not contents.
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
        if not self.enable_prefix_caching or h in self._refs:
            return False
        self._refs[h] = 1
        return True

    def release(self, hashed: Sequence[int], n_plain: int) -> None:
        """Free a sequence's blocks; tail blocks become the first eviction candidates (as vLLM)."""
        self.free_plain += n_plain
        refs, lru = self._refs, self._lru
        for h in reversed(hashed):
            r = refs[h] - 1
            refs[h] = r
            if r == 0:
                lru[h] = None

    def check(self) -> None:
        """Internal consistency (used by tests)."""
        assert 0 <= self.free_plain <= self.num_blocks
        assert all(r >= 0 for r in self._refs.values())
        assert all(self._refs[h] == 0 for h in self._lru)
        in_use_cached = sum(1 for r in self._refs.values() if r > 0)
        assert self.free_plain + len(self._lru) + in_use_cached <= self.num_blocks
