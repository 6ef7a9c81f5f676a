"""Request parsing: OpenAI body + headers → RequestInfo (table-driven, pure)."""

from __future__ import annotations

import orjson
import pytest

from router_client.proxy.errors import InvalidRequest
from router_client.proxy.parsing import CHAT, COMPLETIONS, is_sheddable, parse_request, upstream_body


def _parse(route: str, body: dict[str, object], **headers: str):  # type: ignore[no-untyped-def]
    raw = orjson.dumps(body)
    return parse_request(route, raw, {k.replace("_", "-"): v for k, v in headers.items()}), raw


@pytest.mark.parametrize(("body", "expected"), [
    ({"prompt": "hello world"}, None),
    ({"prompt": [1, 2, 3, 4]}, 4),
    ({"prompt": [[1, 2], [3, 4, 5]]}, 5),
    ({"prompt": "x", "prompt_token_count": 812}, 812),
    ({"prompt": ["a", "b"]}, None),
])
def test_prompt_tokens_exact_only_when_known(body: dict[str, object], expected: int | None) -> None:
    parsed, raw = _parse(COMPLETIONS, body)
    assert parsed.info.prompt_tokens == expected
    assert parsed.info.body_bytes == len(raw)
    assert parsed.info.route == COMPLETIONS


@pytest.mark.parametrize(("body", "expected"), [
    ({"prompt": "x", "max_tokens": 64}, 64),
    ({"prompt": "x", "max_completion_tokens": 32}, 32),
    ({"prompt": "x", "output_tokens": 7}, 7),
    ({"prompt": "x", "max_tokens": 64, "output_tokens": 7}, 64),
    ({"prompt": "x"}, None),
    ({"prompt": "x", "max_tokens": "many"}, None),
])
def test_max_tokens(body: dict[str, object], expected: int | None) -> None:
    assert _parse(COMPLETIONS, body)[0].info.max_tokens == expected


def test_chat_prefix_and_system_hash() -> None:
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    a, _ = _parse(CHAT, {"messages": messages})
    b, _ = _parse(CHAT, {"messages": [messages[0], {"role": "user", "content": "other"}]})
    c, _ = _parse(CHAT, {"messages": [{"role": "user", "content": "no system"}]})
    assert a.info.prefix_text.startswith("<|system|>You are terse.<|user|>hi")
    assert a.info.system_prompt_hash is not None and a.info.system_prompt_hash == b.info.system_prompt_hash
    assert c.info.system_prompt_hash is None
    assert a.info.prefix_text[:30] == b.info.prefix_text[:30]


def test_completion_prefix_is_prompt() -> None:
    parsed, _ = _parse(COMPLETIONS, {"prompt": "shared system prompt. question"})
    assert parsed.info.prefix_text == "shared system prompt. question"
    assert parsed.info.system_prompt_hash is None


def test_slo_headers_priority_and_request_id() -> None:
    parsed, _ = _parse(COMPLETIONS, {"prompt": "x"}, x_llm_d_slo_ttft_ms="250", x_llm_d_slo_tpot_ms="20.5",
                       x_llm_d_priority="sheddable", x_request_id="req-1")
    info = parsed.info
    assert (info.slo_ttft_ms, info.slo_tpot_ms, info.sheddable, info.request_id) == (250.0, 20.5, True, "req-1")
    generated, _ = _parse(COMPLETIONS, {"prompt": "x"})
    assert len(generated.info.request_id) == 32 and not generated.info.sheddable
    assert generated.info.slo_ttft_ms is None


@pytest.mark.parametrize(("raw", "expected"), [
    (None, False), ("sheddable", True), ("Sheddable", True), ("-1", True), ("0", False), ("5", False),
    ("critical", False), ("standard", False),
])
def test_priority(raw: str | None, expected: bool) -> None:
    assert is_sheddable(raw) is expected


@pytest.mark.parametrize(("route", "body", "headers"), [
    (COMPLETIONS, b"{not json", {}),
    (COMPLETIONS, b"[1, 2]", {}),
    (CHAT, b'{"messages": "hi"}', {}),
    (COMPLETIONS, b'{"prompt": "x"}', {"x-llm-d-slo-ttft-ms": "soon"}),
    (COMPLETIONS, b'{"prompt": "x"}', {"x-llm-d-slo-tpot-ms": "-3"}),
    (COMPLETIONS, b'{"prompt": "x"}', {"x-llm-d-priority": "urgent!"}),
])
def test_invalid_requests_are_400(route: str, body: bytes, headers: dict[str, str]) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_request(route, body, headers)
    assert err.value.status == 400


def test_upstream_body_injects_usage_only_for_streams() -> None:
    plain, raw = _parse(COMPLETIONS, {"prompt": "x", "stream": False})
    assert upstream_body(plain, raw) is raw
    stream, raw = _parse(COMPLETIONS, {"prompt": "x", "stream": True, "stream_options": {"continuous": False}})
    sent = orjson.loads(upstream_body(stream, raw))
    assert sent["stream_options"] == {"continuous": False, "include_usage": True}
    assert not stream.client_wants_usage
    asked, raw = _parse(COMPLETIONS, {"prompt": "x", "stream": True, "stream_options": {"include_usage": True}})
    assert asked.client_wants_usage and upstream_body(asked, raw) is raw
