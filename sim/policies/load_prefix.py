"""``load-prefix``: the llm-d router's default scheduling profile, without a predictor — the strongest
heuristic users run today, as a baseline for predicted-latency.

Every candidate pod gets ``2 × queue + 2 × kv + 3 × prefix`` from the router's own llm-d-style scorers
(``queue-scorer``: (max − waiting) / (max − min) of the scraped queues, 1 when all equal;
``kv-cache-utilization-scorer``: 1 − scraped KV usage; ``prefix-cache-scorer``: the router-side share
of the prompt's blocks the pod has seen) and the highest total wins (``max`` picker, random tie-break).
No filters, no exploration, no anti-starvation: exactly the profile, run by the router's scheduling
engine. Options ``queue_weight``, ``kv_weight``, ``prefix_weight`` change the weights.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from pydantic import Field

from router_client.candidates import candidates as build_candidates
from router_client.config import PluginSpec, SchedulerConfig
from router_client.scheduling.contracts import SchedulingRequest
from router_client.scheduling.engine import Scheduler
from sim.cluster.policy import Completion, Decision, PodSnapshot, PolicyContext, RequestView
from sim.policies.options import PolicyOptions


class LoadPrefixOptions(PolicyOptions):

    queue_weight: float = Field(default=2.0, description="Weight of queue-scorer.", ge=0)
    kv_weight: float = Field(default=2.0, description="Weight of kv-cache-utilization-scorer.", ge=0)
    prefix_weight: float = Field(default=3.0, description="Weight of prefix-cache-scorer.", ge=0)


    def scheduler(self) -> SchedulerConfig:
        scorers = [PluginSpec(name="queue-scorer", weight=self.queue_weight),
                   PluginSpec(name="kv-cache-utilization-scorer", weight=self.kv_weight),
                   PluginSpec(name="prefix-cache-scorer", weight=self.prefix_weight)]
        return SchedulerConfig(filters=[], scorers=scorers, fallback_scorers=scorers, picker=PluginSpec(name="max"),
                               exploration=0.0, min_share=0.0)


class LoadPrefixPolicy:
    name = "load-prefix"

    def __init__(self, ctx: PolicyContext) -> None:
        self.opts = LoadPrefixOptions.parse(ctx.options)
        self.scheduler = Scheduler.from_config(self.opts.scheduler())
        self.rng = random.Random(ctx.seed)

    def choose(self, request: RequestView, pods: Sequence[PodSnapshot]) -> Decision:
        candidates = build_candidates([p.pod_id for p in pods], [p.features(request) for p in pods])
        sreq = SchedulingRequest(request.request_id, request.prompt_tokens, request.slo_ttft_ms, request.slo_tpot_ms)
        result = self.scheduler.schedule(sreq, candidates, self.rng)
        index = 0 if result.index is None else result.index
        return Decision.route(candidates[index].pod)

    def on_complete(self, completion: Completion) -> None:
        return None


def load_prefix(ctx: PolicyContext) -> LoadPrefixPolicy:
    return LoadPrefixPolicy(ctx)
