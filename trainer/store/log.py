"""Segmented append-only log of validated samples: acknowledged means durable.

Segments are files ``seg-<first_seq>.log`` in one directory. ``append_rows`` writes one record
with a single ``os.write`` and ``fdatasync`` (one group commit per request) before returning.
``replay`` scans every segment oldest → newest, truncates a torn or corrupt tail (a crash in
the middle of a write) and yields the records so the trainer rebuilds its window. Records carry
their column names: rows written under another feature spec are mapped onto the current layout
(``record.Layout``), never mistaken for corruption. Retention
drops whole oldest segments while the log holds more rows or bytes than configured; segments
roll at a quarter of either limit so retention keeps at least three quarters of them.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shared.bundle import fsync_dir
from shared.errors import StorageError
from trainer.store.record import CURRENT, Layout, Record, RowsRecord, decode_at, encode_flush, encode_rows

log = logging.getLogger(__name__)
PREFIX, SUFFIX = "seg-", ".log"


@dataclass(frozen=True)
class LogLimits:
    max_rows: int = 2_000_000
    max_bytes: int = 1 << 30
    segment_max_bytes: int = 64 << 20

    @property
    def roll_bytes(self) -> int:
        return max(1 << 16, min(self.segment_max_bytes, self.max_bytes // 4))

    @property
    def roll_rows(self) -> int:
        return max(1, self.max_rows // 4)


@dataclass
class Segment:
    path: Path
    bytes: int = 0
    rows: int = 0


class SampleLog:
    """Thread-safe; ``replay()`` must run (to the end) before the first append."""

    def __init__(self, directory: Path, limits: LogLimits, layout: Layout = CURRENT) -> None:
        self.directory = directory
        self.limits = limits
        self.layout = layout
        self._segments: list[Segment] = []
        self._fd: int | None = None
        self._next_seq = 0
        self._lock = threading.Lock()

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self._segments)

    @property
    def total_bytes(self) -> int:
        return sum(s.bytes for s in self._segments)

    @property
    def next_seq(self) -> int:
        return self._next_seq

    def replay(self) -> Iterator[Record]:
        """Yield every durable record in order, repairing a torn tail, then open for appends."""
        self.directory.mkdir(parents=True, exist_ok=True)
        paths = sorted(self.directory.glob(f"{PREFIX}*{SUFFIX}"))
        for path in paths:
            segment = Segment(path)
            yield from self._scan(segment)
            self._segments.append(segment)
        if not self._segments:
            self._segments.append(self._create(self._next_seq))
        self._open_active()

    def _scan(self, segment: Segment) -> Iterator[Record]:
        data = segment.path.read_bytes()
        offset = 0
        mapped: set[tuple[str, ...]] = set()
        while offset < len(data):
            decoded = decode_at(data, offset, self.layout)
            if decoded is None:
                log.warning("sample log %s: torn/corrupt record at byte %d of %d; truncating",
                            segment.path.name, offset, len(data))
                os.truncate(segment.path, offset)
                break
            record, offset = decoded
            if isinstance(record, RowsRecord):
                if record.names != self.layout.fields and record.names not in mapped:
                    mapped.add(record.names)
                    self._log_mapping(segment, record.names)
                segment.rows += record.n_rows
                self._next_seq = max(self._next_seq, record.first_seq + record.n_rows)
            else:
                self._next_seq = max(self._next_seq, record.seq)
            yield record
        segment.bytes = offset

    def _log_mapping(self, segment: Segment, names: tuple[str, ...]) -> None:
        missing = [f for f in self.layout.fields if f not in names]
        dropped = [f for f in names if f not in self.layout.fields]
        log.info("sample log %s: rows stored with another column layout; mapped (defaults for %s, dropped %s)",
                 segment.path.name, missing or "none", dropped or "none")

    def _create(self, first_seq: int) -> Segment:
        path = self.directory / f"{PREFIX}{first_seq:016d}{SUFFIX}"
        path.touch()
        fsync_dir(self.directory)
        return Segment(path)

    def _open_active(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._fd = os.open(self._segments[-1].path, os.O_WRONLY | os.O_APPEND)

    def _write(self, frame: bytes) -> None:
        if self._fd is None:
            raise StorageError("sample log is not open (replay() first)")
        try:
            written = os.write(self._fd, frame)
            if written != len(frame):
                raise StorageError(f"short write to sample log ({written} of {len(frame)} bytes)")
            os.fdatasync(self._fd)
        except OSError as exc:
            raise StorageError(f"cannot write sample log: {exc}") from exc
        self._segments[-1].bytes += len(frame)

    def append_rows(self, matrix: np.ndarray, meta: Mapping[str, Any] | None = None) -> int:
        """Durably append rows (n, k), with ``meta`` in the same record; returns the first row's sequence number."""
        with self._lock:
            first = self._next_seq
            self._write(encode_rows(first, time.time(), matrix, self.layout.fields, meta))
            self._segments[-1].rows += len(matrix)
            self._next_seq += len(matrix)
            self._maintain()
            return first

    def append_flush(self, flush_train: bool, flush_test: bool) -> None:
        """Record a flush; when everything is flushed, older segments are dropped too."""
        with self._lock:
            if flush_train and flush_test:
                self._roll()
                self._drop_oldest(keep=1)
            self._write(encode_flush(self._next_seq, flush_train, flush_test))

    def _maintain(self) -> None:
        active = self._segments[-1]
        if active.bytes >= self.limits.roll_bytes or active.rows >= self.limits.roll_rows:
            self._roll()
        limits = self.limits
        while len(self._segments) > 1 and (self.rows > limits.max_rows or self.total_bytes > limits.max_bytes):
            self._drop_oldest(keep=len(self._segments) - 1)

    def _roll(self) -> None:
        if self._segments[-1].bytes == 0:
            return
        self._segments.append(self._create(self._next_seq))
        self._open_active()

    def _drop_oldest(self, keep: int) -> None:
        while len(self._segments) > keep:
            oldest = self._segments.pop(0)
            log.info("sample log retention: dropping %s (%d rows, %d bytes)", oldest.path.name, oldest.rows,
                     oldest.bytes)
            oldest.path.unlink(missing_ok=True)
        fsync_dir(self.directory)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
