"""Router-side state a real router keeps without asking the pods: in-flight tracking and an
approximate prefix-cache index (what it has sent where, LRU-bounded per pod) — the router
client's own ``PrefixIndex``, so the replay sees exactly what a deployed router would."""

from __future__ import annotations

from collections.abc import Sequence

from router_client.prefix_index import PrefixIndex

__all__ = ["InFlight", "PrefixIndex"]


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
