"""Router-side state a real router keeps without asking the pods: in-flight tracking and an
approximate prefix-cache index (what it has sent where, LRU-bounded per pod)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class PrefixIndex:
    """Per-pod LRU of block hashes the router has routed there; ``capacity`` blocks per pod."""

    def __init__(self, pod_ids: Sequence[str], capacity: int) -> None:
        self.capacity = capacity
        self._blocks: dict[str, OrderedDict[int, None]] = {p: OrderedDict() for p in pod_ids}

    def score(self, pod_id: str, hashes: Sequence[int]) -> float:
        """Leading blocks of ``hashes`` believed cached on ``pod_id`` / ``len(hashes)``."""
        if not hashes:
            return 0.0
        blocks = self._blocks[pod_id]
        matched = 0
        for h in hashes:
            if h not in blocks:
                break
            matched += 1
        return matched / len(hashes)

    def record(self, pod_id: str, hashes: Sequence[int]) -> None:
        blocks = self._blocks[pod_id]
        for h in hashes:
            blocks[h] = None
            blocks.move_to_end(h)
        excess = len(blocks) - self.capacity
        for _ in range(max(0, excess)):
            blocks.popitem(last=False)


class InFlight:
    """Requests dispatched but not completed, and uncached prefill tokens awaiting a first token."""

    def __init__(self, pod_ids: Sequence[str]) -> None:
        self.requests = dict.fromkeys(pod_ids, 0)
        self.prefill_tokens = dict.fromkeys(pod_ids, 0)

    def dispatch(self, pod_id: str, uncached_tokens: int) -> None:
        self.requests[pod_id] += 1
        self.prefill_tokens[pod_id] += uncached_tokens

    def first_token(self, pod_id: str, uncached_tokens: int) -> None:
        self.prefill_tokens[pod_id] -= uncached_tokens

    def complete(self, pod_id: str) -> None:
        self.requests[pod_id] -= 1
