"""OpenAI request body + headers → the facade's ``RequestInfo`` (pure functions, no I/O).

Headers (all optional; table in ``router_client/proxy/README.md``): ``x-llm-d-slo-ttft-ms`` and
``x-llm-d-slo-tpot-ms`` (objectives in ms, > 0), ``x-llm-d-priority`` (``sheddable`` or an
integer; negative = sheddable, as llm-d InferenceObjective priorities) and ``x-request-id``.

Body fields read: ``prompt`` (string, list of strings, token ids or a list of token-id lists),
``messages`` (chat; string content or text parts), ``max_tokens`` / ``max_completion_tokens``,
``stream``, ``stream_options.include_usage`` and the simulator's ``prompt_token_count`` /
``output_tokens`` extension fields. ``prompt_tokens`` is exact only for token-id prompts or an
explicit ``prompt_token_count``; otherwise it is ``None`` and the library estimates from bytes.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from router_client.proxy.errors import InvalidRequest
from router_client.request import RequestInfo

SLO_TTFT_HEADER = "x-llm-d-slo-ttft-ms"
SLO_TPOT_HEADER = "x-llm-d-slo-tpot-ms"
PRIORITY_HEADER = "x-llm-d-priority"
REQUEST_ID_HEADER = "x-request-id"
COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
_SHEDDABLE_WORDS = {"sheddable", "shed", "best-effort", "besteffort", "low"}
_PROTECTED_WORDS = {"critical", "standard", "high", "normal"}


@dataclass(frozen=True)
class ParsedRequest:
    """What the proxy needs after parsing: the routing info and how to forward."""

    info: RequestInfo
    payload: dict[str, Any]
    stream: bool
    client_wants_usage: bool


def parse_request(route: str, body: bytes, headers: Mapping[str, str]) -> ParsedRequest:
    """Parse once; raise ``InvalidRequest`` (400) for anything that cannot be forwarded."""
    payload = _load_object(body)
    stream = payload.get("stream") is True
    options = payload.get("stream_options")
    wants_usage = isinstance(options, dict) and options.get("include_usage") is True
    ttft_slo = _slo(headers.get(SLO_TTFT_HEADER), SLO_TTFT_HEADER)
    tpot_slo = _slo(headers.get(SLO_TPOT_HEADER), SLO_TPOT_HEADER)
    if route == CHAT:
        prefix_text, system_hash = chat_prefix(payload.get("messages"))
    else:
        prefix_text, system_hash = completion_prefix(payload.get("prompt")), None
    info = RequestInfo(
        route=route,
        body_bytes=len(body),
        prompt_tokens=exact_prompt_tokens(payload),
        max_tokens=max_tokens(payload),
        prefix_text=prefix_text,
        system_prompt_hash=system_hash,
        slo_ttft_ms=ttft_slo,
        slo_tpot_ms=tpot_slo,
        sheddable=is_sheddable(headers.get(PRIORITY_HEADER)),
        request_id=headers.get(REQUEST_ID_HEADER) or uuid.uuid4().hex,
    )
    return ParsedRequest(info=info, payload=payload, stream=stream, client_wants_usage=wants_usage)


def upstream_body(parsed: ParsedRequest, original: bytes) -> bytes:
    """The body sent to the pod: streaming requests always ask for the final usage chunk."""
    if not parsed.stream or parsed.client_wants_usage:
        return original
    payload = dict(parsed.payload)
    options = payload.get("stream_options")
    payload["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
    return orjson.dumps(payload)


def _load_object(body: bytes) -> dict[str, Any]:
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise InvalidRequest("request body must be a JSON object")
    return payload


def _slo(raw: str | None, name: str) -> float | None:
    if raw is None or raw.strip() == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise InvalidRequest(f"header {name} must be a number of milliseconds, got {raw!r}", param=name) from None
    if not value > 0 or value == float("inf"):
        raise InvalidRequest(f"header {name} must be a finite number > 0, got {raw!r}", param=name)
    return value


def is_sheddable(raw: str | None) -> bool:
    """``sheddable`` (or a negative integer priority) → True; anything unknown is not sheddable."""
    if raw is None:
        return False
    word = raw.strip().lower()
    if word in _SHEDDABLE_WORDS:
        return True
    if word in _PROTECTED_WORDS:
        return False
    try:
        return int(word) < 0
    except ValueError:
        raise InvalidRequest(
            f"header {PRIORITY_HEADER} must be 'sheddable', 'critical', 'standard' or an integer, got {raw!r}",
            param=PRIORITY_HEADER,
        ) from None


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if value != value or value < 0 or value == float("inf"):
        return None
    return int(value)


def exact_prompt_tokens(payload: Mapping[str, Any]) -> int | None:
    explicit = _positive_int(payload.get("prompt_token_count"))
    if explicit is not None:
        return explicit
    prompt = payload.get("prompt")
    if isinstance(prompt, list) and prompt:
        if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return len(prompt)
        if all(isinstance(p, list) and all(isinstance(t, int) for t in p) for p in prompt):
            return sum(len(p) for p in prompt)
    return None


def max_tokens(payload: Mapping[str, Any]) -> int | None:
    for key in ("max_tokens", "max_completion_tokens", "output_tokens"):
        value = _positive_int(payload.get(key))
        if value is not None:
            return value
    return None


def completion_prefix(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        if all(isinstance(p, str) for p in prompt):
            return "".join(prompt)
        if all(isinstance(t, int) for t in prompt):
            return " ".join(map(str, prompt))
        if prompt and isinstance(prompt[0], list):
            return " ".join(map(str, prompt[0]))
    return ""


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def chat_prefix(messages: Any) -> tuple[str, str | None]:
    """Text hashed for the prefix index (role-tagged, in order) and the hash of the system prompt."""
    if not isinstance(messages, list):
        raise InvalidRequest("'messages' must be a list", param="messages")
    parts: list[str] = []
    system: list[str] = []
    for message in messages:
        if not isinstance(message, dict):
            raise InvalidRequest("each message must be an object", param="messages")
        role = str(message.get("role", ""))
        text = _content_text(message.get("content"))
        if role in ("system", "developer") and len(parts) == len(system):
            system.append(text)
        parts.append(f"<|{role}|>{text}")
    system_hash = hashlib.blake2b("\n".join(system).encode(), digest_size=8).hexdigest() if system else None
    return "".join(parts), system_hash
