"""Request bytes → response bytes for the three predict endpoints. No web types in here.

bytes → ``parse_json`` → rows (1…max) → ``to_columns`` (vectorised validation, 422 naming
row and field) → one evaluation per model for the whole batch → orjson. The caller passes the
``Serving`` snapshot it read once, so the answer and its version header always agree.

Extension: with ``quantiles`` (from ``?quantiles=0.5,0.9,0.99``; any subset of what the bundle
serves) every prediction also carries ``ttft_quantiles_ms`` / ``tpot_quantiles_ms``, objects keyed
by the quantile as the bundle writes it; the contract fields stay the primary quantile.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from predictor.serving import PredictionFailed, Serving
from shared.columns import Bounds, to_columns
from shared.errors import NotReady, RequestValidationFailed
from shared.features import FEATURE_FIELDS, FieldKind
from shared.jsonbody import DEFAULT_MAX_DEPTH, list_field, parse_json
from shared.model import quantile_key
from shared.timefmt import rfc3339
from shared.unknown_fields import REQUEST_FIELDS, UnknownFields, merge

log = logging.getLogger(__name__)

ROWS_ROOT = ("body", "requests")
TOP_LEVEL = frozenset({"requests"})
NOT_READY = "Models not ready"
BATCH_FAILED = "Internal error during batch prediction"
SINGLE_FAILED = "Internal error during prediction"


@dataclass(frozen=True)
class Answer:
    body: bytes
    rows: int


def _require(serving: Serving | None) -> Serving:
    if serving is None:
        raise NotReady(NOT_READY)
    return serving


Quantiles = tuple[float, ...] | None


@dataclass(frozen=True)
class Predicted:
    ttft: list[float]
    tpot: list[float]
    extra: list[dict[str, Any]] | None = None
    """Per row ``{"ttft_quantiles_ms": {...}, "tpot_quantiles_ms": {...}}`` when quantiles were asked for."""


def parse_quantiles(text: str | None) -> Quantiles:
    """``"0.5,0.9"`` → ``(0.5, 0.9)``; ``None`` → ``None``; malformed → 422 naming the parameter."""
    if text is None:
        return None
    try:
        values = tuple(float(part) for part in text.split(","))
    except ValueError:
        values = ()
    if not values or any(not 0 < q < 1 for q in values):
        raise RequestValidationFailed([{
            "type": "value_error", "loc": ["query", "quantiles"], "input": text,
            "msg": "quantiles must be a comma-separated list of numbers in (0, 1), e.g. 0.5,0.9,0.99"}])
    return values


def check_served(serving: Serving | None, quantiles: Quantiles) -> None:
    """422 naming the parameter when a requested quantile is not served by both models."""
    if quantiles is None or serving is None:
        return
    served = set(serving.quantiles("ttft")) & set(serving.quantiles("tpot"))
    missing = [q for q in quantiles if q not in served]
    if missing:
        raise RequestValidationFailed([{
            "type": "value_error", "loc": ["query", "quantiles"], "input": ",".join(map(quantile_key, quantiles)),
            "msg": f"quantile(s) {', '.join(map(quantile_key, missing))} not served; this bundle serves "
                   f"{', '.join(map(quantile_key, sorted(served)))}"}])


def _extra(serving: Serving, values: Mapping[str, np.ndarray], quantiles: tuple[float, ...]) -> list[dict[str, Any]]:
    keys = [quantile_key(q) for q in quantiles]
    per_model = {}
    for name, table in values.items():
        picked = table[:, [serving.quantiles(name).index(q) for q in quantiles]].tolist()
        per_model[f"{name}_quantiles_ms"] = [dict(zip(keys, row, strict=True)) for row in picked]
    return [{field: rows[i] for field, rows in per_model.items()} for i in range(len(picked))]


def _predict(serving: Serving, cols: Mapping[str, np.ndarray], failure: str, quantiles: Quantiles) -> Predicted:
    check_served(serving, quantiles)
    try:
        values = {name: serving.predict(name, cols) for name in ("ttft", "tpot")}
    except PredictionFailed as exc:
        log.error("prediction failed with bundle v%d: %s", serving.version, exc.message)
        raise PredictionFailed(failure) from None
    if not all(np.isfinite(v).all() for v in values.values()):
        raise PredictionFailed(failure)
    ttft, tpot = (values[n][:, serving.primary(n)].tolist() for n in ("ttft", "tpot"))
    return Predicted(ttft, tpot, _extra(serving, values, quantiles) if quantiles else None)


def _common(serving: Serving) -> dict[str, Any]:
    return {"predicted_at": rfc3339(), "model_type": serving.model_type, "objective_type": serving.objective_type,
            "quantile": serving.quantile, "last_model_load": serving.last_model_load}


def _objects(serving: Serving, p: Predicted) -> list[dict[str, Any]]:
    common = _common(serving)
    out = [{"ttft_ms": a, "tpot_ms": b, **common} for a, b in zip(p.ttft, p.tpot, strict=True)]
    if p.extra is not None:
        for obj, extra in zip(out, p.extra, strict=True):
            obj.update(extra)
    return out


def _echo(rows: Sequence[Any], cols: Mapping[str, np.ndarray], i: int) -> dict[str, Any]:
    """Row ``i`` as upstream echoes it: every contract field, defaults filled in, unknown keys dropped;
    an extension field (``pod_class``) only when the client sent it."""
    out: dict[str, Any] = {}
    for field in FEATURE_FIELDS:
        if field.extension and field.name not in rows[i]:
            continue
        if field.kind is FieldKind.LABEL:
            out[field.name] = rows[i].get(field.name) or ""
        elif field.kind is FieldKind.INT:
            out[field.name] = int(cols[field.name][i])
        else:
            out[field.name] = float(cols[field.name][i])
    return out


class HotPath:
    """The three predict endpoints as pure functions of (body, serving snapshot)."""

    def __init__(self, bounds: Bounds, max_rows: int, unknown: UnknownFields | None = None,
                 max_depth: int = DEFAULT_MAX_DEPTH) -> None:
        self._bounds = bounds
        self._max_rows = max_rows
        self._unknown = unknown or UnknownFields(lambda name, n: None, strict=False, where="predictor")
        self._max_depth = max_depth

    def _columns(self, body: bytes) -> tuple[list[Any], dict[str, np.ndarray]]:
        payload = parse_json(body, self._max_depth)
        rows = list_field(payload, "requests", min_len=1, max_len=self._max_rows)
        extra = self._unknown.keys(payload, TOP_LEVEL, ("body",)) + self._unknown.rows(rows, REQUEST_FIELDS, ROWS_ROOT)
        return rows, _validated(rows, ROWS_ROOT, self._bounds, extra)

    def strict(self, body: bytes, serving: Serving | None, quantiles: Quantiles = None) -> Answer:
        start = time.perf_counter()
        _, cols = self._columns(body)
        live = _require(serving)
        predicted = _predict(live, cols, BATCH_FAILED, quantiles)
        n = len(predicted.ttft)
        return Answer(orjson.dumps({
            "predictions": _objects(live, predicted), "total_requests": n, "successful_predictions": n,
            "failed_predictions": 0, "processing_time_ms": (time.perf_counter() - start) * 1e3}), n)

    def bulk(self, body: bytes, serving: Serving | None, quantiles: Quantiles = None) -> Answer:
        """Non-strict: same validation; a failed prediction is a 200 with one error per row."""
        start = time.perf_counter()
        rows, cols = self._columns(body)
        n = len(rows)
        try:
            live = _require(serving)
            predicted = _predict(live, cols, BATCH_FAILED, quantiles)
        except (NotReady, PredictionFailed) as exc:
            text = f"Batch prediction error: {exc.status}: {exc.message}"
            return Answer(orjson.dumps({
                "predictions": [None] * n,
                "errors": [{"index": i, "error": text, "request": _echo(rows, cols, i)} for i in range(n)],
                "total_requests": n, "successful_predictions": 0, "failed_predictions": n,
                "processing_time_ms": (time.perf_counter() - start) * 1e3}), 0)
        return Answer(orjson.dumps({
            "predictions": _objects(live, predicted), "errors": [], "total_requests": n,
            "successful_predictions": n, "failed_predictions": 0,
            "processing_time_ms": (time.perf_counter() - start) * 1e3}), n)

    def single(self, body: bytes, serving: Serving | None, quantiles: Quantiles = None) -> Answer:
        payload = parse_json(body, self._max_depth)
        extra = self._unknown.keys(payload, REQUEST_FIELDS, ("body",))
        try:
            cols = _validated([payload], ("body",), self._bounds, extra)
        except RequestValidationFailed as exc:
            raise RequestValidationFailed([_unindex(e) for e in exc.errors]) from None
        live = _require(serving)
        return Answer(orjson.dumps(_objects(live, _predict(live, cols, SINGLE_FAILED, quantiles))[0]), 1)


def _validated(rows: Any, root: Sequence[Any], bounds: Bounds, extra: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """``to_columns`` plus the unknown-field errors of strict mode (``extra``), in one 422."""
    try:
        cols = to_columns(rows, root, bounds=bounds)
    except RequestValidationFailed as exc:
        raise RequestValidationFailed(merge(exc.errors, extra)) from None
    if extra:
        raise RequestValidationFailed(merge([], extra))
    return cols


def _unindex(error: dict[str, Any]) -> dict[str, Any]:
    """``["body", 0, field]`` → ``["body", field]``: a single request is the body itself."""
    loc = list(error["loc"])
    if len(loc) > 1 and loc[1] == 0:
        del loc[1]
    return {**error, "loc": loc}
