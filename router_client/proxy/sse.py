"""Server-sent-event framing and inspection of OpenAI stream chunks (pure, no I/O).

``SSEScanner.feed(bytes)`` returns the complete events in the bytes seen so far (each with its
terminating blank line) and keeps the incomplete tail. ``inspect`` classifies one event.

The relay's hot path works on whole buffers instead: ``complete_end`` finds where the last
complete event of a buffer ends, ``count_data_events`` counts the ``data:`` events of a run of
complete events with ``bytes.count`` (no per-event slicing), ``NEEDS_INSPECTION`` lists the
markers that make a buffer worth splitting and JSON-parsing, and ``split_events`` splits one
byte-exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

_BOUNDARY = re.compile(rb"\r?\n\r?\n")
DONE_EVENT = b"data: [DONE]\n\n"


NEEDS_INSPECTION = (b'"usage"', b'"error"', b"[DONE]")
"""A buffer of complete events containing none of these holds only plain chunks (content or not)."""


def complete_end(buf: bytes) -> int:
    """Index just past the last event boundary (blank line, LF or CRLF) in ``buf``; 0 if none."""
    if buf.endswith(b"\n\n") or buf.endswith(b"\n\r\n"):
        return len(buf)
    lf = buf.rfind(b"\n\n")
    crlf = buf.rfind(b"\n\r\n")
    return max(lf + 2 if lf >= 0 else 0, crlf + 3 if crlf >= 0 else 0)


def count_data_events(events: bytes) -> int:
    """Number of events starting with ``data:`` in ``events`` (complete events, starting at an event
    start). JSON data cannot hold a raw newline, so a blank line followed by ``data:`` is always an
    event start."""
    return events.count(b"\n\ndata:") + events.count(b"\n\r\ndata:") + events.startswith(b"data:")


def split_events(events: bytes) -> list[bytes]:
    """``events`` split at blank lines, each event keeping its terminator; joined, the parts are
    ``events`` again (a stray trailing remainder is kept as a last part)."""
    parts: list[bytes] = []
    start = 0
    for match in _BOUNDARY.finditer(events):
        parts.append(events[start:match.end()])
        start = match.end()
    if start < len(events):
        parts.append(events[start:])
    return parts


@dataclass(frozen=True)
class Chunk:
    """What one SSE event carries for accounting."""

    done: bool = False
    content: bool = False
    usage: dict[str, Any] | None = None
    usage_only: bool = False
    error: bool = False


EMPTY = Chunk()
DONE = Chunk(done=True)


class SSEScanner:
    """Splits a byte stream into SSE events at blank lines."""

    __slots__ = ("_tail",)

    def __init__(self) -> None:
        self._tail = b""

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._tail + data if self._tail else data
        events: list[bytes] = []
        start = 0
        for match in _BOUNDARY.finditer(buf):
            events.append(buf[start:match.end()])
            start = match.end()
        self._tail = buf[start:]
        return events

    def tail(self) -> bytes:
        """Bytes of an incomplete trailing event (non-empty only if the stream was cut)."""
        return self._tail


def _data_of(event: bytes) -> bytes | None:
    data = [line[5:].lstrip() for line in event.splitlines() if line.startswith(b"data:")]
    if not data:
        return None
    return data[0] if len(data) == 1 else b"\n".join(data)


def _has_content(choices: Any) -> bool:
    if not isinstance(choices, list):
        return False
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        if choice.get("text"):
            return True
        delta = choice.get("delta")
        if isinstance(delta, dict) and (delta.get("content") or delta.get("reasoning_content")
                                        or delta.get("tool_calls")):
            return True
    return False


def inspect(event: bytes) -> Chunk:
    """Classify one event: ``[DONE]``, a content chunk, the usage chunk, an error, or other."""
    data = _data_of(event)
    if data is None:
        return EMPTY
    if data == b"[DONE]":
        return DONE
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return EMPTY
    if not isinstance(obj, dict):
        return EMPTY
    if "error" in obj:
        return Chunk(error=True)
    choices = obj.get("choices")
    usage = obj.get("usage")
    usage = usage if isinstance(usage, dict) else None
    return Chunk(content=_has_content(choices), usage=usage, usage_only=usage is not None and not choices)


def error_event(message: str, error_type: str, code: int = 502) -> bytes:
    """An OpenAI-style in-stream error (vLLM emits the same shape), followed by ``[DONE]``."""
    body = {"error": {"message": message, "type": error_type, "param": None, "code": code}}
    return b"data: " + orjson.dumps(body) + b"\n\n" + DONE_EVENT
