"""``pd-load-prefix``: llm-d's stock P/D profile without a predictor — the baseline for P/D routing.

The decode pod first: ``queue-scorer`` × 2 + ``kv-cache-utilization-scorer`` × 2 + ``prefix-cache-scorer`` × 3
over the decode pods (the router's plugins, max picker, random tie-break, as ``load-prefix``); then the decider
(:mod:`sim.policies.pd.roles`); then, when it disaggregates, the prefill pod by the same load + prefix scorers
over the prefill pods. Options: ``queue_weight``, ``kv_weight``, ``prefix_weight`` (both profiles),
``decider``, ``pd_threshold``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from router_client.candidates import candidates as build_candidates
from router_client.scheduling.contracts import SchedulingRequest
from router_client.scheduling.engine import Scheduler
from sim.cluster.policy import Completion, Decision, PodSnapshot, PolicyContext, RequestView
from sim.policies.load_prefix import LoadPrefixOptions
from sim.policies.pd.roles import DECODE, PREFILL, DeciderOptions, role_row, split

_DECIDER_KEYS = frozenset(DeciderOptions.model_fields)


def _split_options(options: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    decider = {k: v for k, v in options.items() if k in _DECIDER_KEYS}
    return decider, {k: v for k, v in options.items() if k not in _DECIDER_KEYS}


class PdLoadPrefix:
    name = "pd-load-prefix"

    def __init__(self, ctx: PolicyContext) -> None:
        decider, rest = _split_options(ctx.options)
        self.decider = DeciderOptions.parse(decider)
        self.scheduler = Scheduler.from_config(LoadPrefixOptions.parse(rest).scheduler())
        self.rng = random.Random(ctx.seed)

    def choose(self, request: RequestView, pods: Sequence[PodSnapshot]) -> Decision:
        prefill, decode = split(pods)
        pod = self._pick(request, decode, DECODE)
        if not prefill or not self.decider.disaggregate(request, pod):
            return Decision.route(pod.pod_id)
        return Decision.route(pod.pod_id, prefill_pod_id=self._pick(request, prefill, PREFILL).pod_id)

    def on_complete(self, completion: Completion) -> None:
        return None

    def _pick(self, request: RequestView, pods: Sequence[PodSnapshot], role: str) -> PodSnapshot:
        cands = build_candidates([p.pod_id for p in pods], [role_row(request, p, role) for p in pods])
        sreq = SchedulingRequest(request.request_id, request.prompt_tokens, request.slo_ttft_ms, request.slo_tpot_ms)
        result = self.scheduler.schedule(sreq, cands, self.rng)
        return pods[0 if result.index is None else result.index]


def pd_load_prefix(ctx: PolicyContext) -> PdLoadPrefix:
    return PdLoadPrefix(ctx)
