"""Unknown request fields: counted per name, logged once per name, bounded; strict mode names row and field."""

from __future__ import annotations

import logging

import pytest

from shared.unknown_fields import MAX_NAMES, OTHER, REQUEST_FIELDS, UnknownFields


def row(**extra: object) -> dict[str, object]:
    return {"kv_cache_percentage": 0.1, "input_token_length": 3, **extra}


def test_counted_per_name_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    counts: dict[str, int] = {}
    unknown = UnknownFields(lambda n, k: counts.__setitem__(n, counts.get(n, 0) + k), strict=False, where="t")
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert unknown.rows([row(), row(prefill_token_in_flight=5), row(prefill_token_in_flight=1)],
                                REQUEST_FIELDS, ["body", "requests"]) == []
    assert counts == {"prefill_token_in_flight": 6}
    lines = [r for r in caplog.records if "prefill_token_in_flight" in r.getMessage()]
    assert len(lines) == 1
    assert unknown.rows([row(timestamp="2026-01-01T00:00:00Z")], REQUEST_FIELDS, ["body"]) == []
    assert "timestamp" not in counts


def test_strict_mode_names_row_and_field() -> None:
    unknown = UnknownFields(lambda n, k: None, strict=True, where="t")
    errors = unknown.rows([row(), row(typo=1)], REQUEST_FIELDS, ["body", "requests"])
    assert errors == [{"type": "extra_forbidden", "loc": ["body", "requests", 1, "typo"],
                       "msg": "Extra inputs are not permitted", "input": 1}]
    assert unknown.keys({"requests": [], "extra": True}, frozenset({"requests"}), ["body"])[0]["loc"] == \
        ["body", "extra"]


def test_distinct_names_are_bounded() -> None:
    counts: dict[str, int] = {}
    unknown = UnknownFields(lambda n, k: counts.__setitem__(n, counts.get(n, 0) + k), strict=False, where="t")
    unknown.rows([row(**{f"f{i}": 1}) for i in range(MAX_NAMES + 50)], REQUEST_FIELDS, ["body"])
    assert len(counts) == MAX_NAMES + 1 and counts[OTHER] == 50


def test_rows_that_are_not_objects_are_left_to_validation() -> None:
    unknown = UnknownFields(lambda n, k: None, strict=True, where="t")
    assert unknown.rows([1, "abc", [1, 2], row()], REQUEST_FIELDS, ["body"]) == []
