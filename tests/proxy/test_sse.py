"""SSE framing and chunk inspection (pure)."""

from __future__ import annotations

import orjson

from router_client.proxy.sse import DONE_EVENT, SSEScanner, error_event, inspect


def _ev(obj: object) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def test_scanner_reassembles_events_split_anywhere() -> None:
    events = [_ev({"choices": [{"text": f" t{i}"}]}) for i in range(5)] + [DONE_EVENT]
    stream = b"".join(events)
    for cut in range(1, 40):
        scanner = SSEScanner()
        got: list[bytes] = []
        for i in range(0, len(stream), cut):
            got += scanner.feed(stream[i:i + cut])
        assert got == events
        assert scanner.tail() == b""


def test_scanner_handles_crlf_and_keeps_tail() -> None:
    scanner = SSEScanner()
    assert scanner.feed(b"data: [DONE]\r\n\r\ndata: {\"cho") == [b"data: [DONE]\r\n\r\n"]
    assert scanner.tail() == b'data: {"cho'


def test_inspect_classifies_chunks() -> None:
    assert inspect(_ev({"choices": [{"text": " a"}]})).content
    assert not inspect(_ev({"choices": [{"delta": {"role": "assistant", "content": ""}}]})).content
    assert inspect(_ev({"choices": [{"delta": {"content": "x"}}]})).content
    usage = inspect(_ev({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}))
    assert usage.usage_only and usage.usage == {"prompt_tokens": 3, "completion_tokens": 2}
    assert inspect(DONE_EVENT).done
    assert inspect(_ev({"error": {"message": "boom"}})).error
    assert not inspect(b": keep-alive comment\n\n").content
    assert not inspect(b"data: not json\n\n").content


def test_error_event_is_terminated_by_done() -> None:
    raw = error_event("pod died", "upstream_error")
    scanner = SSEScanner()
    first, second = scanner.feed(raw)
    assert inspect(first).error and orjson.loads(first[6:])["error"]["message"] == "pod died"
    assert second == DONE_EVENT
