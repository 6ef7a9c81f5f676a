"""Which candidates play which role, and the decider that keeps a request on its decode pod.

Decode candidates are every pod that is not ``prefill``-role (``decode``, ``both`` and unlabelled pods, as
llm-d's decode filter); prefill candidates are the ``prefill``-role pods (:mod:`sim.cluster.disagg`).

The decider is llm-d's ``prefix-based-pd-decider``: disaggregate iff the prompt tokens the chosen decode pod
does not hold (router-side prefix index) are at least ``pd_threshold``; ``always`` / ``never`` skip the test.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from router_client.candidates import pod_row
from router_client.pd import decider
from shared.features import FeatureRow
from sim.cluster.policy import PodSnapshot, RequestView
from sim.policies.options import PolicyOptions

PREFILL = "prefill"
DECODE = "decode"
WHOLE = ""
"""``pod_type`` of a pod serving a whole request (the decider kept it on the decode pod)."""

Decider = Literal["prefix", "always", "never"]


class DeciderOptions(PolicyOptions):
    """Options every P/D policy takes (``--policy-opt``)."""


    decider: Decider = Field(default="prefix", description="prefix (llm-d's prefix-based-pd-decider), always, never.")
    pd_threshold: int = Field(
        default=512, description="prefix decider: disaggregate iff the decode pod lacks >= this many prompt tokens.",
        ge=1)


    def disaggregate(self, request: RequestView, decode: PodSnapshot) -> bool:
        """The router's decider (``router_client.pd.decider``) on ``decode``'s prefix score."""
        choice = decider.decide(self.decider, self.pd_threshold, request.prompt_tokens, decode.prefix_cache_score)
        return choice == decider.DISAGGREGATED


def uncached_tokens(request: RequestView, pod: PodSnapshot) -> int:
    """Prompt tokens ``pod`` would compute (router-side prefix score, as the replay dispatches)."""
    return decider.uncached_tokens(request.prompt_tokens, pod.prefix_cache_score)


def split(pods: Sequence[PodSnapshot]) -> tuple[list[PodSnapshot], list[PodSnapshot]]:
    """``(prefill candidates, decode candidates)``; with no decode-capable pod left the prefill pods serve whole."""
    prefill = [p for p in pods if p.pod_type == PREFILL]
    decode = [p for p in pods if p.pod_type != PREFILL]
    return (prefill, decode) if decode else ([], prefill)


def role_row(request: RequestView, pod: PodSnapshot, pod_type: str) -> FeatureRow:
    """``pod``'s feature row for ``request`` as it would serve it in the role ``pod_type``."""
    return pod_row(prompt_tokens=request.prompt_tokens, kv_cache=pod.metrics.kv_cache_usage,
                   waiting=pod.metrics.num_requests_waiting, running=pod.in_flight,
                   prefill_tokens_in_flight=pod.prefill_tokens_in_flight, prefix_score=pod.prefix_cache_score,
                   pod_type=pod_type, pod_class=pod.pod_class)
