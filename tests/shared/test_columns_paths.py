"""The single-conversion fast path of shared.columns must agree with the per-field path."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.columns import Bounds, _checked_columns, _fast_columns, to_columns
from shared.errors import RequestValidationFailed
from shared.features import FEATURE_FIELDS, TARGET_FIELDS

FIELDS = FEATURE_FIELDS + TARGET_FIELDS

_number = st.one_of(
    st.integers(-5, 10**8),
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.sampled_from(["12", "0.5", "x", "", "nan"]),
    st.none(),
    st.booleans(),
)
_pod = st.one_of(st.none(), st.sampled_from(["", "prefill", "decode", "both", "weird", "a100"]), st.integers(0, 3))


@st.composite
def rows(draw: st.DrawFn) -> list[dict]:
    out = []
    for _ in range(draw(st.integers(1, 5))):
        row = {}
        for field in FIELDS:
            if field.name in ("pod_type", "pod_class"):
                if draw(st.booleans()):
                    row[field.name] = draw(_pod)
            elif draw(st.integers(0, 9)) > 0:
                row[field.name] = draw(_number) if draw(st.integers(0, 3)) == 0 else draw(
                    st.floats(0, 1) if field.upper else st.integers(0, 5000))
        out.append(row)
    return out


@settings(max_examples=300, deadline=None)
@given(rows())
def test_fast_path_agrees_with_checked_path(batch: list[dict]) -> None:
    try:
        slow = _checked_columns(batch, FIELDS, Bounds(), ["body", "entries"], 1000)
    except RequestValidationFailed:
        slow = None
    fast = _fast_columns(batch, FIELDS, Bounds())
    if fast is None:
        return
    assert slow is not None, f"fast path accepted a batch the checked path rejects: {batch}"
    for name, column in slow.items():
        np.testing.assert_array_equal(fast[name], column, err_msg=name)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1, 1e8, "abc", None, 1.5])
def test_bad_value_always_names_the_field(value: object) -> None:
    row = {f.name: 1 for f in FIELDS if f.name not in ("pod_type", "pod_class")}
    row["kv_cache_percentage"] = 0.5
    row["prefix_cache_score"] = 0.5
    row["input_token_length"] = value
    with pytest.raises(RequestValidationFailed) as caught:
        to_columns([row], ["body", "entries"], targets=True)
    assert caught.value.errors[0]["loc"] == ["body", "entries", 0, "input_token_length"]
