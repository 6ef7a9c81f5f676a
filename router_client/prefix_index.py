"""Approximate prefix-cache index: chained hashes of a prompt's full blocks, remembered per pod (LRU).

A block is ``block_bytes`` characters of prompt text (≈ 16 tokens at ~4 bytes/token). Hashes are
chained (each covers the whole prefix up to its block), so a pod's score for a request is the
number of leading blocks it has seen / the request's number of blocks — the router's guess at
vLLM's automatic prefix caching. Hashes are in-process only (Python's salted ``hash``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


def text_block_hashes(text: str, block_bytes: int, max_blocks: int) -> tuple[int, ...]:
    """Chained hashes of the full ``block_bytes`` blocks of ``text`` (at most ``max_blocks``)."""
    n = min(len(text) // block_bytes, max_blocks)
    out = []
    h = 0
    for i in range(n):
        h = hash((h, text[i * block_bytes:(i + 1) * block_bytes]))
        out.append(h)
    return tuple(out)


class PrefixIndex:
    """Per-pod LRU of block hashes the router has routed there; ``capacity`` blocks per pod."""

    def __init__(self, pods: Sequence[str], capacity: int) -> None:
        self.capacity = capacity
        self._blocks: dict[str, OrderedDict[int, None]] = {p: OrderedDict() for p in pods}

    def score(self, pod: str, hashes: Sequence[int]) -> float:
        """Leading blocks of ``hashes`` believed cached on ``pod`` / ``len(hashes)`` (0 if unknown pod)."""
        if not hashes:
            return 0.0
        blocks = self._blocks.get(pod)
        if not blocks:
            return 0.0
        matched = 0
        for h in hashes:
            if h not in blocks:
                break
            matched += 1
        return matched / len(hashes)

    def scores(self, pods: Sequence[str], hashes: Sequence[int]) -> list[float]:
        """:meth:`score` of each pod of ``pods`` (the loop inlined: sixteen pods a decision)."""
        if not hashes:
            return [0.0] * len(pods)
        n, index, out = len(hashes), self._blocks, []
        for pod in pods:
            blocks = index.get(pod)
            matched = 0
            if blocks:
                for h in hashes:
                    if h not in blocks:
                        break
                    matched += 1
            out.append(matched / n)
        return out

    def record(self, pod: str, hashes: Sequence[int]) -> None:
        """Remember that ``hashes`` were sent to ``pod`` (most recent last; oldest evicted first)."""
        blocks = self._blocks.setdefault(pod, OrderedDict())
        for h in hashes:
            blocks[h] = None
            blocks.move_to_end(h)
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)

    def forget(self, pod: str) -> None:
        """Drop everything recorded for ``pod`` (it left its pool)."""
        self._blocks.pop(pod, None)
