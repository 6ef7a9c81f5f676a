"""OpenAI request parsing and response shapes (completions and chat completions).

Extension fields understood on top of the OpenAI schema:

- ``prompt_token_count`` (int): the prompt's token count, overriding the ~4 bytes/token estimate;
- ``output_tokens`` (int): exact number of tokens to generate (trace-driven load), capped by
  ``max_tokens`` when both are given.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sim.engine.errors import RequestRejected

WORDS = ("the", "model", "sim", "token", "of", "a", "cache", "and", "to", "batch", "is", "in", "prefix",
         "step", "it", "GPU")


class BadRequest(RequestRejected):
    code = "invalid_request_error"


@dataclass(frozen=True)
class ParsedRequest:
    kind: str
    """``"completion"`` or ``"chat"``."""
    text: str | None
    token_ids: list[int] | None
    prompt_token_count: int | None
    max_tokens: int | None
    output_tokens: int | None
    stream: bool
    include_usage: bool
    model: str | None


def _opt_int(body: Mapping[str, Any], key: str, minimum: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise BadRequest(f"'{key}' must be an integer")
    if value < minimum:
        raise BadRequest(f"'{key}' must be >= {minimum}")
    return int(value)


def _prompt(body: Mapping[str, Any]) -> tuple[str | None, list[int] | None]:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt, None
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return None, list(prompt)
    if isinstance(prompt, list) and len(prompt) == 1:
        inner = prompt[0]
        if isinstance(inner, str):
            return inner, None
        if isinstance(inner, list) and all(isinstance(t, int) for t in inner):
            return None, list(inner)
    raise BadRequest("'prompt' must be a string or a list of token ids (one prompt per request)")


def _chat_text(body: Mapping[str, Any]) -> str:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list")
    parts = []
    for m in messages:
        if not isinstance(m, dict):
            raise BadRequest("each message must be an object")
        content = m.get("content") or ""
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if not isinstance(content, str):
            raise BadRequest("message content must be a string or a list of text parts")
        parts.append(f"<|{m.get('role', 'user')}|>\n{content}\n")
    return "".join(parts) + "<|assistant|>\n"


def parse(body: Any, kind: str) -> ParsedRequest:
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    text: str | None
    ids: list[int] | None
    if kind == "chat":
        text, ids = _chat_text(body), None
        max_tokens = _opt_int(body, "max_completion_tokens", 1) or _opt_int(body, "max_tokens", 1)
    else:
        text, ids = _prompt(body)
        max_tokens = _opt_int(body, "max_tokens", 1)
    opts = body.get("stream_options") or {}
    return ParsedRequest(
        kind=kind,
        text=text,
        token_ids=ids,
        prompt_token_count=_opt_int(body, "prompt_token_count", 1),
        max_tokens=max_tokens,
        output_tokens=_opt_int(body, "output_tokens", 1),
        stream=bool(body.get("stream", False)),
        include_usage=bool(isinstance(opts, dict) and opts.get("include_usage")),
        model=body.get("model") if isinstance(body.get("model"), str) else None,
    )


def token_text(index: int) -> str:
    return " " + WORDS[(index * 7 + 3) % len(WORDS)]


class ResponseShaper:
    """Builds OpenAI JSON objects for one request."""

    def __init__(self, kind: str, model: str) -> None:
        self.kind = kind
        self.model = model
        prefix = "chatcmpl" if kind == "chat" else "cmpl"
        self.id = f"{prefix}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.object = "chat.completion" if kind == "chat" else "text_completion"

    def _base(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def chunk(self, index: int, finish_reason: str | None) -> dict[str, Any]:
        text = token_text(index)
        if self.kind == "chat":
            delta: dict[str, Any] = {"content": text}
            if index == 1:
                delta["role"] = "assistant"
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None,
                                      "finish_reason": finish_reason}
            return {**self._base("chat.completion.chunk"), "choices": [choice]}
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        return {**self._base("text_completion"), "choices": [choice]}

    def usage_chunk(self, usage: dict[str, int]) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        return {**self._base(obj), "choices": [], "usage": usage}

    def full(self, tokens: int, finish_reason: str, usage: dict[str, int]) -> dict[str, Any]:
        text = "".join(token_text(i) for i in range(1, tokens + 1))
        if self.kind == "chat":
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                      "logprobs": None, "finish_reason": finish_reason}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        return {**self._base(self.object), "choices": [choice], "usage": usage}


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def error_body(message: str, err_type: str, code: int) -> dict[str, Any]:
    return {"error": {"message": message, "type": err_type, "param": None, "code": code}}
