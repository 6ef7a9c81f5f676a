"""One log record: a 16-byte header (magic, kind, length, crc32) + a payload.

``RowsRecord`` payload: ``first_seq u64 | wall_time f64 | n_rows u32 | n_cols u32`` followed by
``n_cols`` little-endian float64 columns of ``n_rows`` values each (columnar, in
``STORED_FIELDS`` order; ``pod_type`` is its numeric code). ``FlushRecord`` payload:
``seq u64 | flush_train u8 | flush_test u8`` — replayed so a restart sees the same window.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from shared.features import RAW_FEATURE_NAMES, TARGET_FIELDS

STORED_FIELDS: tuple[str, ...] = RAW_FEATURE_NAMES + tuple(f.name for f in TARGET_FIELDS)
MAGIC = 0x4C41544C  # "LTAL"
HEADER = struct.Struct("<IBxxxII")
ROWS_HEAD = struct.Struct("<QdII")
FLUSH_BODY = struct.Struct("<QBB")
KIND_ROWS = 1
KIND_FLUSH = 2


@dataclass(frozen=True)
class RowsRecord:
    first_seq: int
    wall_time: float
    matrix: np.ndarray  # (n_rows, len(STORED_FIELDS)) float64

    @property
    def n_rows(self) -> int:
        return int(self.matrix.shape[0])


@dataclass(frozen=True)
class FlushRecord:
    seq: int
    flush_train: bool
    flush_test: bool


Record = RowsRecord | FlushRecord


def columns_to_matrix(cols: Mapping[str, np.ndarray]) -> np.ndarray:
    """Validated columns → (n, k) float64 matrix in ``STORED_FIELDS`` order."""
    return np.column_stack([np.asarray(cols[name], dtype=np.float64) for name in STORED_FIELDS])


def _frame(kind: int, payload: bytes) -> bytes:
    return HEADER.pack(MAGIC, kind, len(payload), zlib.crc32(payload)) + payload


def encode_rows(first_seq: int, wall_time: float, matrix: np.ndarray) -> bytes:
    n, k = matrix.shape
    body = np.ascontiguousarray(matrix.T, dtype="<f8").tobytes()
    return _frame(KIND_ROWS, ROWS_HEAD.pack(first_seq, wall_time, n, k) + body)


def encode_flush(seq: int, flush_train: bool, flush_test: bool) -> bytes:
    return _frame(KIND_FLUSH, FLUSH_BODY.pack(seq, int(flush_train), int(flush_test)))


def _decode_payload(kind: int, payload: bytes) -> Record | None:
    if kind == KIND_FLUSH and len(payload) == FLUSH_BODY.size:
        seq, train, test = FLUSH_BODY.unpack(payload)
        return FlushRecord(seq, bool(train), bool(test))
    if kind != KIND_ROWS or len(payload) < ROWS_HEAD.size:
        return None
    first_seq, wall, n, k = ROWS_HEAD.unpack_from(payload)
    if k != len(STORED_FIELDS) or len(payload) != ROWS_HEAD.size + 8 * n * k:
        return None
    flat = np.frombuffer(payload, dtype="<f8", offset=ROWS_HEAD.size)
    return RowsRecord(first_seq, wall, flat.reshape(k, n).T.astype(np.float64))


def decode_at(buf: bytes | memoryview, offset: int) -> tuple[Record, int] | None:
    """Decode the record at ``offset``; ``None`` on a torn or corrupt record (the valid log ends there)."""
    end_head = offset + HEADER.size
    if end_head > len(buf):
        return None
    magic, kind, length, crc = HEADER.unpack_from(buf, offset)
    end = end_head + length
    if magic != MAGIC or end > len(buf):
        return None
    payload = bytes(buf[end_head:end])
    if zlib.crc32(payload) != crc:
        return None
    record = _decode_payload(kind, payload)
    return None if record is None else (record, end)
