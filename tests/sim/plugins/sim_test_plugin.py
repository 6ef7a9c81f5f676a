"""A policy plugin loaded by ``--policy-module`` in the replay CLI test (not a test module)."""

from __future__ import annotations

from collections.abc import Sequence

from sim.cluster.policy import Completion, Decision, PodSnapshot, PolicyContext, RequestView


class FirstFitPredicting:
    name = "first-fit-predicting"

    def __init__(self, ctx: PolicyContext) -> None:
        self.max_prompt = int(ctx.options.get("max_prompt", "3000"))
        self.completed = 0

    def choose(self, request: RequestView, pods: Sequence[PodSnapshot]) -> Decision:
        if request.prompt_tokens > self.max_prompt:
            return Decision.shed("too_big_for_test")
        pod = min(pods, key=lambda p: p.in_flight)
        return Decision.route(pod.pod_id, predicted_ttft_ms=100.0, predicted_tpot_ms=20.0)

    def on_complete(self, completion: Completion) -> None:
        self.completed += 1


def register_policies(registry) -> None:  # type: ignore[no-untyped-def]
    registry.register(FirstFitPredicting.name, FirstFitPredicting, replace=True)
