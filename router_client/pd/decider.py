"""llm-d's ``prefix-based-pd-decider``: keep a request on its decode pod when that pod holds (most of) the prompt.

Shared by the router (:meth:`router_client.router.Router.decide`) and the simulator's P/D policies
(``sim/policies/pd/``). The uncached tokens come from the router-side prefix index (``prefix_cache_score``).
"""

from __future__ import annotations

DISAGGREGATED = "disaggregated"
CACHED = "decode_holds_prefix"
"""Kept whole: the decode pod holds enough of the prompt that fewer than the threshold tokens are left."""
SHORT = "short_prompt"
"""Kept whole: the whole prompt is shorter than the threshold."""
NEVER = "decider_never"
NO_PREFILL_POD = "no_prefill_pod"


def uncached_tokens(prompt_tokens: int, prefix_score: float) -> int:
    """Prompt tokens a pod with ``prefix_score`` would have to compute."""
    return round(prompt_tokens * (1.0 - prefix_score))


def decide(mode: str, threshold: int, prompt_tokens: int, prefix_score: float) -> str:
    """:data:`DISAGGREGATED` or why the request stays whole on its decode pod (``mode``: prefix, always, never)."""
    if mode == "always":
        return DISAGGREGATED
    if mode == "never":
        return NEVER
    if uncached_tokens(prompt_tokens, prefix_score) >= threshold:
        return DISAGGREGATED
    return SHORT if prompt_tokens < threshold else CACHED
