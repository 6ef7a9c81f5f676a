"""``pd-round-robin``: round-robin over the decode pods, the decider, round-robin over the prefill pods."""

from __future__ import annotations

from collections.abc import Sequence

from sim.cluster.policy import Completion, Decision, PodSnapshot, PolicyContext, RequestView
from sim.policies.pd.roles import DeciderOptions, split


class PdRoundRobin:
    name = "pd-round-robin"

    def __init__(self, ctx: PolicyContext) -> None:
        self.decider = DeciderOptions.parse(ctx.options)
        self._next = {"prefill": 0, "decode": 0}

    def choose(self, request: RequestView, pods: Sequence[PodSnapshot]) -> Decision:
        prefill, decode = split(pods)
        pod = self._turn("decode", decode)
        if not prefill or not self.decider.disaggregate(request, pod):
            return Decision.route(pod.pod_id)
        return Decision.route(pod.pod_id, prefill_pod_id=self._turn("prefill", prefill).pod_id)

    def on_complete(self, completion: Completion) -> None:
        return None

    def _turn(self, role: str, pods: Sequence[PodSnapshot]) -> PodSnapshot:
        i = self._next[role]
        self._next[role] = i + 1
        return pods[i % len(pods)]


def pd_round_robin(ctx: PolicyContext) -> PdRoundRobin:
    return PdRoundRobin(ctx)
