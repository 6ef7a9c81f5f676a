"""JSON depth: the cheap exact check agrees with a plain recursive depth on any value; deep bodies are 422s."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.errors import RequestValidationFailed
from shared.jsonbody import dumps, parse_json
from shared.jsondepth import check_depth


def depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    return 0


text = st.text(alphabet=st.sampled_from('ab[]{}"\\\n'), max_size=6)
json_values = st.recursive(st.none() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | text,
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
                           max_leaves=40)


@settings(max_examples=400, derandomize=True, deadline=None)
@given(json_values, st.integers(min_value=3, max_value=8))
def test_check_depth_is_exact(value: Any, limit: int) -> None:
    body = orjson.dumps(value)
    if depth(value) > limit:
        with pytest.raises(RequestValidationFailed):
            check_depth(orjson.loads(body), body, limit)
    else:
        check_depth(orjson.loads(body), body, limit)


@pytest.mark.parametrize("n", [5, 500])  # below and above the size from which numpy counts the brackets
def test_brackets_in_strings_and_nested_values_in_big_bodies(n: int) -> None:
    rows = [{"kv_cache_percentage": 0.5, "pod_type": "[[[[[[[[[[{{{{decode"} for _ in range(n)]
    assert parse_json(orjson.dumps({"requests": rows}), 4)["requests"][0]["pod_type"].startswith("[")
    rows[-1]["extra"] = [[[{"a": [1]}]]]  # depth 8
    body = orjson.dumps({"requests": rows})
    assert parse_json(body, 8)
    with pytest.raises(RequestValidationFailed):
        parse_json(body, 7)


@pytest.mark.parametrize("body", [b"[" * 100_000, b"[" * 2000 + b"]" * 2000, b'{"a":' * 40 + b"1" + b"}" * 40,
                                  b"[NaN," + b"[" * 5000 + b"]" * 5001, b'{"requests":[{"x":' + b"[" * 33 + b"]" * 33
                                  + b"}]}"])
def test_too_deep_is_a_422_naming_the_limit(body: bytes) -> None:
    with pytest.raises(RequestValidationFailed) as info:
        parse_json(body, 32)
    (error,) = info.value.errors
    assert error["type"] == "json_too_deep" and error["loc"] == ["body"]
    assert "32" in error["msg"] or "1024" in error["msg"]


def test_echo_of_a_deep_value_is_bounded() -> None:
    deep = orjson.loads(b"[" * 1000 + b"]" * 1000)
    out = orjson.loads(dumps({"detail": [{"input": deep}]}))
    assert depth(out) < 80
