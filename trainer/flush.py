"""``POST /flush`` (contract §4): body model and response shape (the write token is checked by
``trainer.access``, before the route)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from shared.errors import RequestValidationFailed, StorageError
from shared.jsonbody import parse_json
from shared.timefmt import rfc3339
from shared.unknown_fields import UnknownFields, merge
from trainer.service import TrainerService


class FlushRequest(BaseModel):
    flush_training_data: bool = True
    flush_test_data: bool = True
    flush_metrics: bool = True
    reason: str | None = None


FIELDS = frozenset(FlushRequest.model_fields)


def parse_request(body: bytes, max_depth: int, unknown: UnknownFields) -> FlushRequest:
    if not body.strip():
        return FlushRequest()
    payload = parse_json(body, max_depth)
    extra = unknown.keys(payload, FIELDS, ["body"])
    try:
        request = FlushRequest.model_validate(payload)
    except ValidationError as exc:
        raise RequestValidationFailed(merge([{**{k: v for k, v in e.items() if k not in ("url", "loc")},
                                              "loc": ["body", *e["loc"]]} for e in exc.errors()], extra)) from None
    if extra:
        raise RequestValidationFailed(extra)
    return request


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
