"""Ingest: request bytes → validated columns → durable log → training window.

Atomic by default (any invalid row → 422, nothing stored). Partial mode stores the valid rows
and reports the rejected ones. Rows with both targets 0 are valid but not stored (contract §2.2).
Unknown fields are counted (or, strict, rejected per row: ``shared.unknown_fields``). With an
``Idempotency-Key`` a batch already stored is acknowledged again, not stored (``idempotency``).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shared.columns import Bounds, invalid_rows, to_columns
from shared.errors import RequestValidationFailed, StorageError
from shared.features import MODEL_NAMES, TARGET_OF
from shared.jsonbody import list_field, parse_json
from shared.unknown_fields import TRAINING_FIELDS, UnknownFields, merge
from trainer.idempotency import IdempotencyKeys, record_meta, request_digest
from trainer.metrics import TrainerMetrics
from trainer.store import SampleLog
from trainer.store.record import STORED_FIELDS, columns_to_matrix
from trainer.window import COL, Window

log = logging.getLogger(__name__)
ROOT = ["body", "entries"]
TOP_LEVEL = frozenset({"entries"})


@dataclass(frozen=True)
class IngestLimits:
    max_rows: int
    max_depth: int = 32


@dataclass
class IngestResult:
    sent: int
    accepted: int
    rejected: list[dict[str, Any]] = field(default_factory=list)
    replayed: bool = False

    @property
    def message(self) -> str:
        return f"Accepted {self.sent} training samples."


def validate(rows: list[Any], bounds: Bounds, max_errors: int) -> dict[str, np.ndarray]:
    return to_columns(rows, ROOT, targets=True, bounds=bounds, max_errors=max_errors)


class Ingestor:
    def __init__(self, sample_log: SampleLog, window: Window, metrics: TrainerMetrics, bounds: Bounds,
                 limits: IngestLimits, unknown: UnknownFields, keys: IdempotencyKeys) -> None:
        self.log, self.window, self.metrics = sample_log, window, metrics
        self.bounds, self.limits = bounds, limits
        self.unknown, self.keys = unknown, keys
        self.lock = threading.Lock()  # log order == window order

    def ingest(self, body: bytes, partial: bool, key: str | None = None) -> IngestResult:
        digest = request_digest(body, partial) if key is not None else None
        if key is not None and digest is not None:
            self.keys.seen(key, digest)  # a reused key with another body: 422 before any work
        payload = parse_json(body, self.limits.max_depth)
        rows = list_field(payload, "entries", min_len=0, max_len=self.limits.max_rows)
        extra = self.unknown.keys(payload, TOP_LEVEL, ["body"])
        if not rows and not extra:
            return IngestResult(0, 0)
        max_errors = len(rows) * len(STORED_FIELDS) + len(extra) + 1 if partial else 1000
        try:
            cols = self._validated(rows, extra, max_errors)
            rejected: list[dict[str, Any]] = []
        except RequestValidationFailed as exc:
            bad = invalid_rows(exc.errors)
            self.metrics.count_rejected({e["type"] for e in errs} for errs in bad.values())
            if not partial or not bad or sum(map(len, bad.values())) < len(exc.errors):  # a body-level error
                self.metrics.requests.labels(outcome="rejected").inc()
                raise
            rejected = [{"index": i, "errors": errs} for i, errs in sorted(bad.items())]
            keep = [row for i, row in enumerate(rows) if i not in bad]
            cols = validate(keep, self.bounds, max_errors) if keep else {}
        accepted = len(cols["actual_ttft_ms"]) if cols else 0
        stored = self.store(columns_to_matrix(cols), key, digest) if accepted else True
        outcome = "replayed" if not stored else "partial" if rejected else "accepted"
        self.metrics.requests.labels(outcome=outcome).inc()
        return IngestResult(len(rows), accepted, rejected, replayed=not stored)

    def _validated(self, rows: list[Any], extra: list[dict[str, Any]], max_errors: int) -> dict[str, np.ndarray]:
        """Columns of ``rows``; unknown fields (strict mode) and top-level ``extra`` fail like invalid values."""
        extra = extra + self.unknown.rows(rows, TRAINING_FIELDS, ROOT)
        try:
            cols = validate(rows, self.bounds, max_errors) if rows else {}
        except RequestValidationFailed as exc:
            raise RequestValidationFailed(merge(exc.errors, extra, max_errors)) from None
        if extra:
            raise RequestValidationFailed(merge([], extra, max_errors))
        return cols

    def store(self, matrix: np.ndarray, key: str | None = None, digest: str | None = None) -> bool:
        """Durably append (one write + fdatasync, the idempotency key in the same record) and add to the
        window; False when ``key`` was already stored (nothing written). Raises StorageError."""
        useful = (matrix[:, COL["actual_ttft_ms"]] > 0) | (matrix[:, COL["actual_tpot_ms"]] > 0)
        if not useful.all():
            self.metrics.discarded.inc(int((~useful).sum()))
            matrix = matrix[useful]
        if not len(matrix):
            return True
        with self.lock:
            if key is not None and digest is not None and self.keys.seen(key, digest):
                return False
            try:
                first = self.log.append_rows(matrix, record_meta(key, digest))
            except StorageError:
                log.exception("durable append failed")
                raise StorageError("Failed to add training data in bulk") from None
            self.window.add(first, matrix)
            if key is not None and digest is not None:
                self.keys.remember(key, digest)
        for name in MODEL_NAMES:
            self.metrics.ingested.labels(model=name).inc(int((matrix[:, COL[TARGET_OF[name]]] > 0).sum()))
        return True

    def flush(self, train: bool, test: bool) -> dict[str, tuple[int, int]]:
        with self.lock:
            if train or test:
                self.log.append_flush(train, test)
            return self.window.flush(train, test)
