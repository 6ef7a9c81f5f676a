"""``POST /flush`` (contract §4): body model, optional bearer guard, response shape."""

from __future__ import annotations

import hmac
from typing import Any

from pydantic import BaseModel, ValidationError

from shared.errors import RequestValidationFailed, StorageError, Unauthorized
from shared.jsonbody import parse_json
from shared.timefmt import rfc3339
from trainer.service import TrainerService


class FlushRequest(BaseModel):
    flush_training_data: bool = True
    flush_test_data: bool = True
    flush_metrics: bool = True
    reason: str | None = None


def check_token(expected: str | None, authorization: str | None) -> None:
    """With LATENCY_WRITE_TOKEN set, require ``Authorization: Bearer <token>``."""
    if expected is None:
        return
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected.encode()):
        raise Unauthorized("Missing or invalid bearer token")


def parse_request(body: bytes) -> FlushRequest:
    if not body.strip():
        return FlushRequest()
    try:
        return FlushRequest.model_validate(parse_json(body))
    except ValidationError as exc:
        raise RequestValidationFailed([{**{k: v for k, v in e.items() if k not in ("url", "loc")},
                                        "loc": ["body", *e["loc"]]} for e in exc.errors()]) from None


def flush(service: TrainerService, request: FlushRequest) -> dict[str, Any]:
    try:
        counts = service.ingestor.flush(request.flush_training_data, request.flush_test_data)
    except StorageError as exc:
        raise StorageError(f"Failed to flush data: {exc.message}") from exc
    if request.flush_metrics:
        service.metrics.clear_history()
    (ttft_train, ttft_test), (tpot_train, tpot_test) = counts["ttft"], counts["tpot"]
    parts = []
    if request.flush_training_data:
        parts.append(f"{ttft_train} TTFT and {tpot_train} TPOT training samples")
    if request.flush_test_data:
        parts.append(f"{ttft_test} TTFT and {tpot_test} TPOT test samples")
    if request.flush_metrics:
        parts.append("all metric scores")
    return {"success": True, "flushed_at": rfc3339(), "reason": request.reason,
            "ttft_training_samples_flushed": ttft_train, "tpot_training_samples_flushed": tpot_train,
            "ttft_test_samples_flushed": ttft_test, "tpot_test_samples_flushed": tpot_test,
            "metrics_cleared": request.flush_metrics,
            "message": "Successfully flushed: " + ", ".join(parts) if parts else "No data flushed"}
