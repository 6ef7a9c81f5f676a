"""Contract §0/§2: lax numbers, defaults, ranges, non-finite values (shared/columns.py, jsonbody.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from shared.columns import Bounds, invalid_rows, to_columns
from shared.errors import RequestValidationFailed
from shared.jsonbody import list_field, parse_json

ROOT = ["body", "entries"]


def row(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"kv_cache_percentage": 0.5, "input_token_length": 100, "num_request_waiting": 0,
                            "num_request_running": 1, "num_tokens_generated": 0, "prefix_cache_score": 0.0,
                            "actual_ttft_ms": 10.0, "actual_tpot_ms": 0.0}
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not ...}


def errors_of(rows: list[dict[str, Any]], bounds: Bounds | None = None) -> list[dict[str, Any]]:
    with pytest.raises(RequestValidationFailed) as info:
        to_columns(rows, ROOT, targets=True, bounds=bounds)
    return info.value.errors


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("input_token_length", 200.0, 200), ("input_token_length", "200", 200), ("kv_cache_percentage", 1, 1.0),
    ("prefix_cache_score", "0.5", 0.5), ("actual_ttft_ms", 3, 3.0)])
def test_lax_numbers_accepted(field: str, value: Any, expected: float) -> None:
    cols = to_columns([row(**{field: value})], ROOT, targets=True)
    assert cols[field][0] == expected


def test_defaults_and_unknown_keys() -> None:
    cols = to_columns([row(timestamp="2026-01-01T00:00:00Z", future_field=[1, 2])], ROOT, targets=True)
    for name in ("prefill_tokens_in_flight", "decode_tokens_in_flight", "encoder_input_size", "encoder_matched_size",
                 "pod_type", "pod_class"):
        assert cols[name][0] == 0.0


@pytest.mark.parametrize(("pod_class", "code"), [(None, 0), ("", 0), ("a100", 6866563), ("llama3-8b-h100", 4383526)])
def test_pod_class_any_string_becomes_its_code(pod_class: Any, code: int) -> None:
    rows = [row(pod_class=pod_class), row(pod_class=pod_class, pod_type="decode")]
    np.testing.assert_array_equal(to_columns(rows, ROOT, targets=True)["pod_class"], [code, code])


def test_pod_class_mixed_with_rows_without_it() -> None:
    cols = to_columns([row(), row(pod_class="a100"), row(pod_class=None)], ROOT, targets=True)
    np.testing.assert_array_equal(cols["pod_class"], [0, 6866563, 0])


@pytest.mark.parametrize(("pod_type", "code"), [(None, 0), ("", 0), ("prefill", 1), ("decode", 2), ("encode", 3)])
def test_pod_type_any_string(pod_type: Any, code: int) -> None:
    assert to_columns([row(pod_type=pod_type)], ROOT, targets=True)["pod_type"][0] == code


@pytest.mark.parametrize(("field", "value", "kind"), [
    ("input_token_length", 200.5, "int_from_float"), ("input_token_length", -1, "greater_than_equal"),
    ("prefill_tokens_in_flight", -1, "greater_than_equal"), ("kv_cache_percentage", 1.01, "less_than_equal"),
    ("prefix_cache_score", -0.1, "greater_than_equal"), ("input_token_length", "abc", "int_parsing"),
    ("kv_cache_percentage", "x", "float_parsing"), ("input_token_length", None, "int_type"),
    ("pod_type", 3, "string_type"), ("pod_class", 7, "string_type"), ("pod_class", ["a"], "string_type"),
    ("actual_ttft_ms", float("nan"), "finite_number"),
    ("actual_tpot_ms", float("inf"), "finite_number"), ("actual_ttft_ms", float("-inf"), "finite_number"),
    ("actual_ttft_ms", 4e6, "less_than_equal"),
    ("input_token_length", 2e7, "less_than_equal"), ("num_request_waiting", 1e9, "less_than_equal")])
def test_invalid_values_name_the_field(field: str, value: Any, kind: str) -> None:
    errors = errors_of([row(), row(**{field: value})])
    assert [(e["type"], e["loc"]) for e in errors] == [(kind, ["body", "entries", 1, field])]
    assert set(errors[0]) >= {"type", "loc", "msg", "input"}


def test_negative_has_contract_shape() -> None:
    (error,) = errors_of([row(prefill_tokens_in_flight=-1)])
    assert error == {"type": "greater_than_equal", "loc": ["body", "entries", 0, "prefill_tokens_in_flight"],
                     "msg": "Input should be greater than or equal to 0", "input": -1, "ctx": {"ge": 0}}


def test_missing_required_field() -> None:
    (error,) = errors_of([row(actual_tpot_ms=...)])
    assert error["type"] == "missing" and error["loc"] == ["body", "entries", 0, "actual_tpot_ms"]


def test_configurable_bounds() -> None:
    assert errors_of([row(input_token_length=2000)], Bounds(max_tokens=1000))[0]["type"] == "less_than_equal"


def test_invalid_rows_groups_by_index() -> None:
    errors = errors_of([row(input_token_length=-1), row(), row(actual_ttft_ms=-1, kv_cache_percentage=3)])
    assert sorted(invalid_rows(errors)) == [0, 2]
    assert len(invalid_rows(errors)[2]) == 2


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity", b"1e999"])
def test_non_finite_json_literals_reach_validation(literal: bytes) -> None:
    body = b'{"entries": [{"kv_cache_percentage": 0.1, "input_token_length": 1, "num_request_waiting": 0, ' \
           b'"num_request_running": 0, "num_tokens_generated": 0, "prefix_cache_score": 0, "actual_tpot_ms": 0, ' \
           b'"actual_ttft_ms": ' + literal + b"}]}"
    rows = list_field(parse_json(body), "entries")
    (error,) = errors_of(rows)
    assert error["type"] == "finite_number" and error["loc"][-1] == "actual_ttft_ms"


@pytest.mark.parametrize(("body", "kind"), [(b"", "missing"), (b"{bad", "json_invalid"), (b"[]", None)])
def test_body_errors(body: bytes, kind: str | None) -> None:
    with pytest.raises(RequestValidationFailed) as info:
        list_field(parse_json(body), "entries")
    if kind:
        assert info.value.errors[0]["type"] == kind


def test_vectorised_columns_are_float64() -> None:
    cols = to_columns([row(input_token_length=i) for i in range(100)], ROOT, targets=True)
    assert cols["input_token_length"].dtype == np.float64 and cols["input_token_length"][99] == 99
