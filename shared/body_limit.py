"""Request-body byte limits, enforced before a body is read: the ``BodyLimit`` ASGI middleware.

Each path has a limit (``limits``; others get ``default``). A declared ``Content-Length`` above it is
answered 413 at once, before a byte of the body is read (the server discards what the client still
sends; memory stays flat). A body without a length (chunked) is counted as it streams in and cut off
at the limit with the same 413 — so at most ``limit`` bytes are ever buffered.
"""

from __future__ import annotations

from collections.abc import Mapping

from shared.asgi import ASGIApp, Message, Receive, Scope, Send, header, send_json
from shared.errors import PayloadTooLarge


def too_large(limit: int, method: str, path: str) -> PayloadTooLarge:
    return PayloadTooLarge(f"Request body exceeds the limit of {limit} bytes for {method} {path}")


class BodyLimit:
    def __init__(self, app: ASGIApp, limits: Mapping[str, int], default: int) -> None:
        self.app = app
        self.limits = dict(limits)
        self.default = default

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limits.get(scope["path"], self.default)
        declared = header(scope, b"content-length")
        if declared is not None and declared.isdigit():
            if int(declared) > limit:
                error = too_large(limit, scope["method"], scope["path"])
                await send_json(send, error.status, {"detail": error.message})
                return
            await self.app(scope, receive, send)  # the server never delivers more than Content-Length
            return
        await self.app(scope, _counting(receive, limit, scope), send)


def _counting(receive: Receive, limit: int, scope: Scope) -> Receive:
    seen = 0

    async def counted() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise too_large(limit, scope["method"], scope["path"])
        return message

    return counted
