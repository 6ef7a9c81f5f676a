"""What the router knows about a request before dispatch (a leaf module: the classifier, the router
and the proxy all read it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RequestInfo:
    """What the router knows about a request before dispatch."""

    route: str
    """"/v1/completions" or "/v1/chat/completions" (any string: it keys the bytes/token EMA)."""
    body_bytes: int
    prompt_tokens: int | None = None
    """Exact prompt tokens when known; otherwise estimated from ``body_bytes``."""
    max_tokens: int | None = None
    prefix_text: str = ""
    """Text hashed for the prefix index (system prompt + messages, or the prompt)."""
    system_prompt_hash: str | None = None
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    sheddable: bool = False
    request_id: str = ""
