"""``dual-pool-round-robin``: the dual-pool classifier (and optional tuner) in front, round-robin
inside the chosen pool — the dual-pool configuration without latency models, as a baseline."""

from __future__ import annotations

from collections.abc import Sequence

from sim.cluster.policy import Completion, Decision, PodSnapshot, PolicyContext, RequestView
from sim.policies.options import ReplayOptions
from sim.policies.pools import PoolSelector


class DualPoolRoundRobin:
    name = "dual-pool-round-robin"

    def __init__(self, ctx: PolicyContext) -> None:
        opts = ReplayOptions.parse(ctx.options)
        pools: dict[str, list[str]] = {}
        for pod_id, pool in ctx.pods:
            pools.setdefault(pool, []).append(pod_id)
        self.selector = PoolSelector(opts, pools)
        self._next: dict[str, int] = {}

    def choose(self, request: RequestView, pods: Sequence[PodSnapshot]) -> Decision:
        pool, cands = self.selector.select(request, pods)
        i = self._next.get(pool, 0)
        self._next[pool] = i + 1
        return Decision.route(cands[i % len(cands)].pod_id)

    def on_complete(self, completion: Completion) -> None:
        self.selector.on_complete(completion)

    def status(self) -> dict[str, object]:
        tuning = self.selector.status()
        return {} if tuning is None else {"tuning": tuning}
