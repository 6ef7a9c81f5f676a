"""Rows of JSON objects → validated numpy columns, vectorised, with FastAPI-shaped errors.

The fast path converts each field of the whole batch with one ``np.array`` call; only when
that fails (missing keys, strings, nulls, wrong types) does a per-value pass run, and only
for that field. Every problem becomes one 422 ``detail`` element whose ``loc`` names the
row and field, so a bulk write is all-or-nothing and the client learns exactly what to fix.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import numpy as np

from shared.errors import RequestValidationFailed
from shared.features import FEATURE_FIELDS, TARGET_FIELDS, FieldKind, RawField

MAX_REPORTED_ERRORS = 1000


@dataclass(frozen=True)
class Bounds:
    """Plausibility limits beyond the contract's ranges (ours; configurable)."""

    max_tokens: float = 1e7
    max_latency_ms: float = 3.6e6
    max_requests: float = 1e6


def _err(kind: str, loc: list[Any], msg: str, value: Any, ctx: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind, "loc": loc, "msg": msg, "input": value}
    if ctx is not None:
        out["ctx"] = ctx
    return out


def _coerce_scalar(field: RawField, value: Any, loc: list[Any]) -> tuple[float, dict[str, Any] | None]:
    """Pydantic-v2 lax coercion of one value; returns (number, error or None)."""
    is_int = field.kind is FieldKind.INT
    if value is None or not isinstance(value, (int, float, str)):
        kind, msg = ("int_type", "Input should be a valid integer") if is_int else (
            "float_type", "Input should be a valid number")
        return 0.0, _err(kind, loc, msg, value)
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            kind, msg = ("int_parsing", "Input should be a valid integer, unable to parse string as an "
                         "integer") if is_int else (
                "float_parsing", "Input should be a valid number, unable to parse string as a number")
            return 0.0, _err(kind, loc, msg, value)
        return number, None
    try:
        return float(value), None
    except OverflowError:
        return math.inf, None


def _field_values(rows: Sequence[Any], field: RawField, root: list[Any]) -> tuple[np.ndarray, list[dict]]:
    name = field.name
    raw = [row.get(name) for row in rows]
    if all(type(v) in (int, float) for v in raw):
        try:
            return np.asarray(raw, dtype=np.float64), []
        except OverflowError:
            pass
    out = np.empty(len(rows), dtype=np.float64)
    errors: list[dict] = []
    for i, value in enumerate(raw):
        if value is None and (not field.required or name not in rows[i]):
            if field.required:
                errors.append(_err("missing", [*root, i, name], "Field required", rows[i]))
            out[i] = field.default
            continue
        out[i], problem = _coerce_scalar(field, value, [*root, i, name])
        if problem:
            errors.append(problem)
    return out, errors


def _range_errors(values: np.ndarray, field: RawField, upper: float | None, root: list[Any],
                  raw_rows: Sequence[Any]) -> list[dict]:
    name, errors = field.name, []
    bad_finite = ~np.isfinite(values)
    for i in np.flatnonzero(bad_finite):
        errors.append(_err("finite_number", [*root, int(i), name], "Input should be a finite number",
                           raw_rows[int(i)].get(name)))
    safe = np.where(bad_finite, 0.0, values)
    for i in np.flatnonzero(safe < 0):
        errors.append(_err("greater_than_equal", [*root, int(i), name],
                           "Input should be greater than or equal to 0", raw_rows[int(i)].get(name), {"ge": 0}))
    if upper is not None:
        for i in np.flatnonzero(safe > upper):
            errors.append(_err("less_than_equal", [*root, int(i), name],
                               f"Input should be less than or equal to {upper:g}", raw_rows[int(i)].get(name),
                               {"le": upper}))
    if field.kind is FieldKind.INT:
        for i in np.flatnonzero(safe != np.floor(safe)):
            errors.append(_err("int_from_float", [*root, int(i), name],
                               "Input should be a valid integer, got a number with a fractional part",
                               raw_rows[int(i)].get(name)))
    return errors


def _labels(rows: Sequence[Any], field: RawField, root: list[Any]) -> tuple[np.ndarray, list[dict]]:
    errors: list[dict] = []
    codes = np.zeros(len(rows), dtype=np.float64)
    encode = _encoder(field)
    for i, row in enumerate(rows):
        value = row.get(field.name)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            errors.append(_err("string_type", [*root, i, field.name], "Input should be a valid string", value))
            continue
        codes[i] = encode(value)
    return codes, errors


def _encoder(field: RawField) -> Callable[[str | None], int]:
    if field.encode is None:
        raise TypeError(f"label field {field.name!r} has no encoder")
    return field.encode


def upper_bound(field: RawField, bounds: Bounds) -> float:
    if field.upper is not None:
        return field.upper
    if field.name.startswith("actual_"):
        return bounds.max_latency_ms
    if field.name in ("num_request_waiting", "num_request_running"):
        return bounds.max_requests
    return bounds.max_tokens


def _check_rows_are_objects(rows: Any, root: list[Any]) -> None:
    if not isinstance(rows, list):
        raise RequestValidationFailed([_err("list_type", root, "Input should be a valid list", rows)])
    errors = [_err("model_attributes_type", [*root, i], "Input should be a valid dictionary or object to "
                   "extract fields from", row) for i, row in enumerate(rows) if not isinstance(row, dict)]
    if errors:
        raise RequestValidationFailed(errors[:MAX_REPORTED_ERRORS])


def to_columns(rows: Any, root: Sequence[Any], *, targets: bool = False, bounds: Bounds | None = None,
               max_errors: int = MAX_REPORTED_ERRORS) -> dict[str, np.ndarray]:
    """Validate ``rows`` (a list of JSON objects) into float64 columns, or raise 422.

    ``root`` is the ``loc`` prefix, e.g. ``["body", "requests"]``. Label fields (``pod_type``,
    ``pod_class``) become their numeric codes (``shared.features``); absent or null → 0. With
    ``targets`` the two ``actual_*`` fields are required.
    """
    base = list(root)
    limits = bounds or Bounds()
    _check_rows_are_objects(rows, base)
    fields = FEATURE_FIELDS + (TARGET_FIELDS if targets else ())
    cols = _fast_columns(rows, fields, limits)
    if cols is None:
        cols = _checked_columns(rows, fields, limits, base, max_errors)
    return cols


def _fast_columns(rows: list[dict], fields: tuple[RawField, ...], limits: Bounds) -> dict[str, np.ndarray] | None:
    """The common case in one conversion: every numeric key present and valid; ``None`` otherwise."""
    numeric = [f for f in fields if f.kind is not FieldKind.LABEL]
    getter = itemgetter(*[f.name for f in numeric])
    try:
        try:
            values = list(map(getter, rows))
        except KeyError:
            defaults = {f.name: f.default for f in numeric if not f.required}
            values = [getter({**defaults, **row}) for row in rows]
        matrix = np.array(values, dtype=np.float64)
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    matrix = matrix.reshape(len(rows), len(numeric))
    uppers = np.array([upper_bound(f, limits) for f in numeric])
    ints = np.array([f.kind is FieldKind.INT for f in numeric])
    with np.errstate(invalid="ignore"):
        ok = bool(np.isfinite(matrix).all() and (matrix >= 0).all() and (matrix <= uppers).all())
        ok = ok and bool((matrix[:, ints] == np.floor(matrix[:, ints])).all())
    if not ok:
        return None
    cols = {f.name: matrix[:, j] for j, f in enumerate(numeric)}
    for field in fields:
        if field.kind is FieldKind.LABEL:
            codes = _fast_labels(rows, field)
            if codes is None:
                return None
            cols[field.name] = codes
    return cols


def _fast_labels(rows: list[dict], field: RawField) -> np.ndarray | None:
    """Codes of one label field when every value is a string or absent/null; ``None`` otherwise."""
    values = [row.get(field.name) for row in rows]
    if not any(values):
        return np.zeros(len(rows)) if all(v is None or v == "" for v in values) else None
    if not all(v is None or isinstance(v, str) for v in values):
        return None
    encode = _encoder(field)
    return np.array([encode(v) for v in values], dtype=np.float64)


def _checked_columns(rows: list[dict], fields: tuple[RawField, ...], limits: Bounds, base: list[Any],
                     max_errors: int) -> dict[str, np.ndarray]:
    """Field by field, collecting every problem as a 422 detail element."""
    cols: dict[str, np.ndarray] = {}
    errors: list[dict] = []
    for field in fields:
        if field.kind is FieldKind.LABEL:
            cols[field.name], problems = _labels(rows, field, base)
        else:
            cols[field.name], problems = _field_values(rows, field, base)
            problems += _range_errors(cols[field.name], field, upper_bound(field, limits), base, rows)
        errors += problems
    if errors:
        raise RequestValidationFailed(_sorted(errors)[:max_errors])
    return cols


def _sorted(errors: list[dict]) -> list[dict]:
    return sorted(errors, key=lambda e: e["loc"][2] if len(e["loc"]) > 2 and isinstance(e["loc"][2], int)
                  else -1)


def invalid_rows(errors: list[dict], depth: int = 2) -> dict[int, list[dict]]:
    """Group validation errors by row index (``loc[depth]``) — for partial-accept modes."""
    grouped: dict[int, list[dict]] = {}
    for error in errors:
        loc = error["loc"]
        if len(loc) > depth and isinstance(loc[depth], int):
            grouped.setdefault(loc[depth], []).append(error)
    return grouped


def finite_or_fail(value: float) -> float:
    """Guard for outputs: never emit NaN/Infinity in JSON."""
    if not math.isfinite(value):
        raise ValueError("non-finite value in response")
    return value
