"""Ingest: request bytes → validated columns → live check → durable log → training window.

Atomic by default (any invalid row → 422, nothing stored). Partial mode stores the valid rows
and reports the rejected ones. Rows with both targets 0 are valid but not stored (contract §2.2).
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
from trainer.live import LiveBundle
from trainer.metrics import TrainerMetrics
from trainer.prequential import Prequential
from trainer.quarantine import Quarantine
from trainer.store import RowsRecord, SampleLog
from trainer.store.record import STORED_FIELDS, columns_to_matrix
from trainer.window import COL, Window

log = logging.getLogger(__name__)
ROOT = ["body", "entries"]


@dataclass
class IngestResult:
    sent: int
    accepted: int
    rejected: list[dict[str, Any]] = field(default_factory=list)

    @property
    def message(self) -> str:
        return f"Accepted {self.sent} training samples."


def validate(rows: list[Any], bounds: Bounds, max_errors: int) -> dict[str, np.ndarray]:
    return to_columns(rows, ROOT, targets=True, bounds=bounds, max_errors=max_errors)


class Ingestor:
    def __init__(self, sample_log: SampleLog, window: Window, metrics: TrainerMetrics, bounds: Bounds,
                 max_rows: int, live: LiveBundle, prequential: Prequential, quarantine: Quarantine) -> None:
        self.log, self.window, self.metrics = sample_log, window, metrics
        self.bounds, self.max_rows = bounds, max_rows
        self.live, self.prequential, self.quarantine = live, prequential, quarantine
        self.lock = threading.Lock()  # log order == window order

    def ingest(self, body: bytes, partial: bool, source: str = "unknown") -> IngestResult:
        rows = list_field(parse_json(body), "entries", min_len=0, max_len=self.max_rows)
        if not rows:
            return IngestResult(0, 0)
        max_errors = len(rows) * len(STORED_FIELDS) + 1 if partial else 1000
        try:
            cols = validate(rows, self.bounds, max_errors)
            rejected: list[dict[str, Any]] = []
        except RequestValidationFailed as exc:
            bad = invalid_rows(exc.errors)
            self.metrics.count_rejected({e["type"] for e in errs} for errs in bad.values())
            if not partial or not bad:
                self.metrics.requests.labels(outcome="rejected").inc()
                raise
            rejected = [{"index": i, "errors": errs} for i, errs in sorted(bad.items())]
            keep = [row for i, row in enumerate(rows) if i not in bad]
            cols = validate(keep, self.bounds, max_errors) if keep else {}
        accepted = len(cols["actual_ttft_ms"]) if cols else 0
        if accepted:
            self.store(columns_to_matrix(cols), source)
        self.metrics.requests.labels(outcome="partial" if rejected else "accepted").inc()
        return IngestResult(len(rows), accepted, rejected)

    def store(self, matrix: np.ndarray, source: str = "unknown") -> None:
        """Check against the live model, durably append (one write + fdatasync: clean and quarantined rows
        together) and add the clean rows to the window; raises StorageError."""
        useful = (matrix[:, COL["actual_ttft_ms"]] > 0) | (matrix[:, COL["actual_tpot_ms"]] > 0)
        if not useful.all():
            self.metrics.discarded.inc(int((~useful).sum()))
            matrix = matrix[useful]
        if not len(matrix):
            return
        check = self.prequential.check(self.live.get(), matrix)
        suspect = self.quarantine.split(matrix, None if check is None else check.top)
        parts: list[tuple[np.ndarray, dict[str, Any]]] = [
            (matrix[~suspect], {"source": source}), (matrix[suspect], {"source": source, "quarantined": True})]
        batches = [(rows, meta) for rows, meta in parts if len(rows)]
        with self.lock:
            try:
                firsts = self.log.append_batches(batches)
            except StorageError:
                log.exception("durable append failed")
                raise StorageError("Failed to add training data in bulk") from None
            now = time.time()
            for (rows, meta), first in zip(batches, firsts, strict=True):
                self.apply(RowsRecord(first, now, rows, meta=meta))
            self.quarantine.note(int((~suspect).sum()), int(suspect.sum()), source)
            if self.quarantine.due():
                self._release()
        self._count(matrix[~suspect], int(suspect.sum()))

    def apply(self, record: RowsRecord) -> None:
        """Route a stored rows record: quarantined → held; a release → window (and forget what it covers)."""
        if record.meta.get("quarantined"):
            self.quarantine.hold(record.first_seq, record.matrix)
            return
        through = record.meta.get("release_through_seq")
        if isinstance(through, int):
            self.quarantine.forget_through(through)
        self.window.add(record.first_seq, record.matrix, record.wall_time)

    def _release(self) -> None:
        rows, through = self.quarantine.release()
        meta = {"release_through_seq": through}
        first = self.log.append_rows(rows, meta)
        self.apply(RowsRecord(first, time.time(), rows, meta=meta))
        self.metrics.released.inc(len(rows))
        log.warning("quarantine released %d rows: they were the majority of what arrived for %d intervals, from "
                    "%d or more clients", len(rows), self.quarantine.policy.sustain_intervals,
                    self.quarantine.policy.min_sources)

    def _count(self, clean: np.ndarray, held: int) -> None:
        for name in MODEL_NAMES:
            self.metrics.ingested.labels(model=name).inc(int((clean[:, COL[TARGET_OF[name]]] > 0).sum()))
        if held:
            self.metrics.quarantined.inc(held)

    def flush(self, train: bool, test: bool) -> dict[str, tuple[int, int]]:
        with self.lock:
            if train or test:
                self.log.append_flush(train, test)
            return self.window.flush(train, test)
