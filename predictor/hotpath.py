"""Request bytes → response bytes for the three predict endpoints. No web types in here.

bytes → ``parse_json`` → rows (1…max) → ``to_columns`` (vectorised validation, 422 naming
row and field) → one evaluation per model for the whole batch → orjson. The caller passes the
``Serving`` snapshot it read once, so the answer and its version header always agree.
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
from shared.jsonbody import list_field, parse_json
from shared.timefmt import rfc3339

log = logging.getLogger(__name__)

ROWS_ROOT = ("body", "requests")
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


def _predict(serving: Serving, cols: Mapping[str, np.ndarray], failure: str) -> tuple[list[float], list[float]]:
    try:
        ttft = serving.predict("ttft", cols)
        tpot = serving.predict("tpot", cols)
    except PredictionFailed as exc:
        log.error("prediction failed with bundle v%d: %s", serving.version, exc.message)
        raise PredictionFailed(failure) from None
    if not (np.isfinite(ttft).all() and np.isfinite(tpot).all()):
        raise PredictionFailed(failure)
    return ttft.tolist(), tpot.tolist()


def _common(serving: Serving) -> dict[str, Any]:
    return {"predicted_at": rfc3339(), "model_type": serving.model_type, "objective_type": serving.objective_type,
            "quantile": serving.quantile, "last_model_load": serving.last_model_load}


def _objects(serving: Serving, ttft: list[float], tpot: list[float]) -> list[dict[str, Any]]:
    common = _common(serving)
    return [{"ttft_ms": a, "tpot_ms": b, **common} for a, b in zip(ttft, tpot, strict=True)]


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

    def __init__(self, bounds: Bounds, max_rows: int) -> None:
        self._bounds = bounds
        self._max_rows = max_rows

    def _columns(self, body: bytes) -> tuple[list[Any], dict[str, np.ndarray]]:
        rows = list_field(parse_json(body), "requests", min_len=1, max_len=self._max_rows)
        return rows, to_columns(rows, ROWS_ROOT, bounds=self._bounds)

    def strict(self, body: bytes, serving: Serving | None) -> Answer:
        start = time.perf_counter()
        _, cols = self._columns(body)
        live = _require(serving)
        ttft, tpot = _predict(live, cols, BATCH_FAILED)
        n = len(ttft)
        return Answer(orjson.dumps({
            "predictions": _objects(live, ttft, tpot), "total_requests": n, "successful_predictions": n,
            "failed_predictions": 0, "processing_time_ms": (time.perf_counter() - start) * 1e3}), n)

    def bulk(self, body: bytes, serving: Serving | None) -> Answer:
        """Non-strict: same validation; a failed prediction is a 200 with one error per row."""
        start = time.perf_counter()
        rows, cols = self._columns(body)
        n = len(rows)
        try:
            live = _require(serving)
            ttft, tpot = _predict(live, cols, BATCH_FAILED)
        except (NotReady, PredictionFailed) as exc:
            text = f"Batch prediction error: {exc.status}: {exc.message}"
            return Answer(orjson.dumps({
                "predictions": [None] * n,
                "errors": [{"index": i, "error": text, "request": _echo(rows, cols, i)} for i in range(n)],
                "total_requests": n, "successful_predictions": 0, "failed_predictions": n,
                "processing_time_ms": (time.perf_counter() - start) * 1e3}), 0)
        return Answer(orjson.dumps({
            "predictions": _objects(live, ttft, tpot), "errors": [], "total_requests": n,
            "successful_predictions": n, "failed_predictions": 0,
            "processing_time_ms": (time.perf_counter() - start) * 1e3}), n)

    def single(self, body: bytes, serving: Serving | None) -> Answer:
        payload = parse_json(body)
        try:
            cols = to_columns([payload], ("body",), bounds=self._bounds)
        except RequestValidationFailed as exc:
            raise RequestValidationFailed([_unindex(e) for e in exc.errors]) from None
        live = _require(serving)
        ttft, tpot = _predict(live, cols, SINGLE_FAILED)
        return Answer(orjson.dumps(_objects(live, ttft, tpot)[0]), 1)


def _unindex(error: dict[str, Any]) -> dict[str, Any]:
    """``["body", 0, field]`` → ``["body", field]``: a single request is the body itself."""
    loc = list(error["loc"])
    if len(loc) > 1 and loc[1] == 0:
        del loc[1]
    return {**error, "loc": loc}
