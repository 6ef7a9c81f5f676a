"""Ingest: request bytes → validated columns → durable log → training window.

Atomic by default (any invalid row → 422, nothing stored). Partial mode stores the valid rows
and reports the rejected ones. Rows with both targets 0 are valid but not stored (contract §2.2).
Unknown fields are counted (or, strict, rejected per row: ``shared.unknown_fields``). With an
``Idempotency-Key`` a batch already stored is acknowledged again, not stored (``idempotency``).
Before storing, the live model predicts every row (prequential error, drift alarm) and rows far
beyond its p99 are quarantined: stored durably in the same write, flagged, kept out of the window
until the quarantine releases them (``trainer.quarantine``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shared.columns import Bounds, invalid_rows, to_columns
from shared.errors import RequestValidationFailed, StorageError
from shared.features import MODEL_NAMES, TARGET_OF
from shared.jsonbody import list_field, parse_json
from shared.unknown_fields import TRAINING_FIELDS, UnknownFields, merge
from trainer.history import IngestRate
from trainer.idempotency import IdempotencyKeys, record_meta, request_digest
from trainer.live import LiveBundle
from trainer.metrics import TrainerMetrics
from trainer.prequential import Prequential
from trainer.quarantine import Quarantine
from trainer.store import RowsRecord, SampleLog
from trainer.store.record import STORED_FIELDS, columns_to_matrix
from trainer.window import COL, Window

log = logging.getLogger(__name__)
ROOT = ["body", "entries"]
TOP_LEVEL = frozenset({"entries"})


@dataclass(frozen=True)
class IngestLimits:
    max_rows: int
    max_depth: int = 32


@dataclass(frozen=True)
class LiveChecks:
    """What every stored batch is checked against: the live model (prequential error, quarantine)."""

    live: LiveBundle
    prequential: Prequential
    quarantine: Quarantine


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
                 limits: IngestLimits, unknown: UnknownFields, keys: IdempotencyKeys, checks: LiveChecks,
                 rate: IngestRate | None = None) -> None:
        self.log, self.window, self.metrics = sample_log, window, metrics
        self.bounds, self.limits = bounds, limits
        self.unknown, self.keys = unknown, keys
        self.checks, self.quarantine = checks, checks.quarantine
        self.rate = rate
        self.lock = threading.Lock()  # log order == window order

    def ingest(self, body: bytes, partial: bool, key: str | None = None, source: str = "unknown") -> IngestResult:
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
        stored = self.store(columns_to_matrix(cols), key, digest, source) if accepted else True
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

    def store(self, matrix: np.ndarray, key: str | None = None, digest: str | None = None,
              source: str = "unknown") -> bool:
        """Check against the live model, durably append (one write + fdatasync: clean rows, quarantined rows and
        the idempotency key together) and add the clean rows to the window; False when ``key`` was already
        stored (nothing written). Raises StorageError."""
        useful = (matrix[:, COL["actual_ttft_ms"]] > 0) | (matrix[:, COL["actual_tpot_ms"]] > 0)
        if not useful.all():
            self.metrics.discarded.inc(int((~useful).sum()))
            matrix = matrix[useful]
        if not len(matrix):
            return True
        check = self.checks.prequential.check(self.checks.live.get(), matrix)
        suspect = self.quarantine.split(matrix, None if check is None else check.top)
        with self.lock:
            if key is not None and digest is not None and self.keys.seen(key, digest):
                return False
            self._append(self._batches(matrix, suspect, source, record_meta(key, digest)))
            if key is not None and digest is not None:
                self.keys.remember(key, digest)
            self.quarantine.note(int((~suspect).sum()), int(suspect.sum()), source)
            if self.quarantine.due():
                self._release()
        self._count(matrix[~suspect], int(suspect.sum()))
        return True

    @staticmethod
    def _batches(matrix: np.ndarray, suspect: np.ndarray, source: str,
                 key_meta: dict[str, str] | None) -> list[tuple[np.ndarray, dict[str, Any]]]:
        """The records of one stored batch: clean rows, quarantined rows; the idempotency key rides on the first."""
        parts: list[tuple[np.ndarray, dict[str, Any]]] = [
            (matrix[~suspect], {"source": source}), (matrix[suspect], {"source": source, "quarantined": True})]
        batches = [(rows, meta) for rows, meta in parts if len(rows)]
        batches[0][1].update(key_meta or {})
        return batches

    def _append(self, batches: list[tuple[np.ndarray, dict[str, Any]]]) -> None:
        try:
            firsts = self.log.append_batches(batches)
        except StorageError:
            log.exception("durable append failed")
            raise StorageError("Failed to add training data in bulk") from None
        now = time.time()
        for (rows, meta), first in zip(batches, firsts, strict=True):
            self.apply(RowsRecord(first, now, rows, meta=meta))

    def apply(self, record: RowsRecord) -> None:
        """Route a stored rows record: quarantined → held; a release → window (and forget what it covers)."""
        self.keys.restore(record.meta, record.wall_time)
        if record.meta.get("quarantined"):
            self.quarantine.hold(record.first_seq, record.matrix)
            return
        through = record.meta.get("release_through_seq")
        if isinstance(through, int):
            self.quarantine.forget_through(through)
        self.window.add(record.first_seq, record.matrix, record.wall_time)

    def _release(self) -> None:
        rows, through = self.quarantine.release()
        self._append([(rows, {"release_through_seq": through})])
        self.metrics.released.inc(len(rows))
        log.warning("quarantine released %d rows: they were the majority of what arrived for %d intervals, from "
                    "%d or more clients", len(rows), self.quarantine.policy.sustain_intervals,
                    self.quarantine.policy.min_sources)

    def _count(self, clean: np.ndarray, held: int) -> None:
        if self.rate is not None:
            self.rate.add(len(clean) + held)
        for name in MODEL_NAMES:
            self.metrics.ingested.labels(model=name).inc(int((clean[:, COL[TARGET_OF[name]]] > 0).sum()))
        if held:
            self.metrics.quarantined.inc(held)

    def flush(self, train: bool, test: bool) -> dict[str, tuple[int, int]]:
        with self.lock:
            if train or test:
                self.log.append_flush(train, test)
            return self.window.flush(train, test)
