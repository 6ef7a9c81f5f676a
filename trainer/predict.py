"""In-process ``POST /predict`` (contract §4): same code path as the predictor (shared.model)."""

from __future__ import annotations

from typing import Any

import numpy as np

from shared.columns import to_columns
from shared.errors import RequestValidationFailed
from shared.features import MODEL_NAMES
from shared.jsonbody import parse_json
from shared.timefmt import rfc3339
from shared.unknown_fields import REQUEST_FIELDS, merge
from trainer.service import TrainerService
from trainer.views import require_live


def _single_row(payload: Any) -> dict[str, np.ndarray]:
    if not isinstance(payload, dict):
        raise RequestValidationFailed([{"type": "model_attributes_type", "loc": ["body"], "input": payload,
                                        "msg": "Input should be a valid dictionary or object to extract fields from"}])
    try:
        return to_columns([payload], ["body"])
    except RequestValidationFailed as exc:
        for error in exc.errors:  # ["body", 0, field] → ["body", field]
            error["loc"] = [error["loc"][0], *error["loc"][2:]]
        raise


def predict(service: TrainerService, body: bytes) -> dict[str, Any]:
    payload = parse_json(body, service.settings.max_json_depth)
    extra = service.unknown.keys(payload, REQUEST_FIELDS, ["body"])
    try:
        cols = _single_row(payload)
    except RequestValidationFailed as exc:
        raise RequestValidationFailed(merge(exc.errors, extra)) from None
    if extra:
        raise RequestValidationFailed(extra)
    loaded = require_live(service)
    s = service.settings
    out: dict[str, Any] = {}
    for name in MODEL_NAMES:
        value = float(loaded.predict(name, cols)[0])
        if not np.isfinite(value):
            raise RequestValidationFailed([{"type": "value_error", "loc": ["body"], "msg": "non-finite prediction",
                                            "input": None}])
        uncertainty = 0.1 * value
        out[f"{name}_ms"] = value
        out[f"{name}_uncertainty"] = uncertainty
        out[f"{name}_prediction_bounds"] = [max(0.0, value - 2 * uncertainty), value + 2 * uncertainty]
    return {**out, "predicted_at": rfc3339(), "model_type": s.model_type, "objective_type": s.objective_type,
            "quantile": s.quantile_alpha, "bundle_version": loaded.version}
