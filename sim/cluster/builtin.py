"""Built-in routing policies: round-robin, random, least-queue, least-kv, prefix-affinity."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from sim.cluster.policy import Completion, Decision, PodSnapshot, PolicyContext, PolicyFactory, RequestView


def _reject_unknown(options: Mapping[str, str], known: set[str]) -> None:
    unknown = set(options) - known
    if unknown:
        raise ValueError(f"unknown policy options: {sorted(unknown)}")


class _Base:
    name = "base"

    def on_complete(self, completion: Completion) -> None:
        return None


class RoundRobin(_Base):
    name = "round-robin"

    def __init__(self, ctx: PolicyContext) -> None:
        _reject_unknown(ctx.options, set())
        self._next = 0

    def choose(self, request: RequestView, pods: Sequence[PodSnapshot]) -> Decision:
        pod = pods[self._next % len(pods)]
        self._next += 1
        return Decision.route(pod.pod_id)


class RandomPolicy(_Base):
    name = "random"

    def __init__(self, ctx: PolicyContext) -> None:
        _reject_unknown(ctx.options, set())
        self._rng = random.Random(ctx.seed)

    def choose(self, request: RequestView, pods: Sequence[PodSnapshot]) -> Decision:
        return Decision.route(pods[self._rng.randrange(len(pods))].pod_id)


def _queue_load(p: PodSnapshot) -> tuple[int, int]:
    return (p.metrics.num_requests_waiting, p.in_flight)


class LeastQueue(_Base):
    """Fewest scraped waiting requests, then fewest router-side in-flight; random tie-break."""

    name = "least-queue"

    def __init__(self, ctx: PolicyContext) -> None:
        _reject_unknown(ctx.options, set())
        self._rng = random.Random(ctx.seed)

    def choose(self, request: RequestView, pods: Sequence[PodSnapshot]) -> Decision:
        best = min(_queue_load(p) for p in pods)
        ties = [p for p in pods if _queue_load(p) == best]
        return Decision.route(ties[self._rng.randrange(len(ties))].pod_id)


class LeastKV(_Base):
    """Lowest scraped KV-cache usage, then fewest in-flight."""

    name = "least-kv"

    def __init__(self, ctx: PolicyContext) -> None:
        _reject_unknown(ctx.options, set())

    def choose(self, request: RequestView, pods: Sequence[PodSnapshot]) -> Decision:
        pod = min(pods, key=lambda p: (round(p.metrics.kv_cache_usage, 3), p.in_flight))
        return Decision.route(pod.pod_id)


class PrefixAffinity(_Base):
    """Best router-side prefix score if it reaches ``min_score`` and the pod's queue is within
    ``max_queue_gap`` of the least-loaded pod; otherwise least-queue (llm-d style)."""

    name = "prefix-affinity"

    def __init__(self, ctx: PolicyContext) -> None:
        _reject_unknown(ctx.options, {"min_score", "max_queue_gap"})
        self.min_score = float(ctx.options.get("min_score", "0.25"))
        self.max_queue_gap = int(ctx.options.get("max_queue_gap", "4"))
        self._fallback = LeastQueue(PolicyContext(ctx.seed, ctx.pods))

    def choose(self, request: RequestView, pods: Sequence[PodSnapshot]) -> Decision:
        least = min(p.metrics.num_requests_waiting + p.in_flight for p in pods)
        ok = [p for p in pods if p.metrics.num_requests_waiting + p.in_flight <= least + self.max_queue_gap]
        best = max(ok, key=lambda p: (p.prefix_cache_score, -p.in_flight))
        if best.prefix_cache_score >= self.min_score:
            return Decision.route(best.pod_id)
        return self._fallback.choose(request, pods)


BUILTIN_POLICIES: dict[str, PolicyFactory] = {
    RoundRobin.name: RoundRobin,
    RandomPolicy.name: RandomPolicy,
    LeastQueue.name: LeastQueue,
    LeastKV.name: LeastKV,
    PrefixAffinity.name: PrefixAffinity,
}
