"""Raw ASGI helpers for the guards that run before either server's framework (no framework types)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from shared.jsonbody import dumps

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of request header ``name`` (lower-case bytes), or None."""
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


async def send_json(send: Send, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
    """A complete JSON response (``{"detail": ...}`` shapes) sent without the framework."""
    body = dumps(payload)
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
