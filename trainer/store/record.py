"""One log record: a 16-byte header (magic, kind, length, crc32) + a payload.

Rows records say which columns they hold, so a spec change never makes old rows unreadable:

* ``KIND_ROWS_NAMED`` (written now): ``first_seq u64 | wall_time f64 | n_rows u32 | n_cols u32 |
  names_len u32`` + the column names (UTF-8, ``\\n``-joined) + ``n_cols`` little-endian float64 columns
  of ``n_rows`` values each (columnar; ``pod_type`` is its numeric code).
* ``KIND_ROWS_META``: a ``KIND_ROWS_NAMED`` record followed by ``meta_len u32`` + a JSON object of
  facts stored atomically with the rows (the sending client, quarantine flags, the ingest
  ``Idempotency-Key`` and body digest), written only when there is meta.
* ``KIND_ROWS`` (format 1, read only): the same without the names; its columns are
  ``LEGACY_V1_FIELDS``, the layout every log held before names were recorded.

Reading maps a record's columns onto the current layout by name: a column the record lacks gets
the field's spec default, a column the spec no longer has is dropped. ``FlushRecord`` payload:
``seq u64 | flush_train u8 | flush_test u8`` — replayed so a restart sees the same window.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
import orjson

from shared.features import FEATURE_FIELDS, RAW_FEATURE_NAMES, TARGET_FIELDS

STORED_FIELDS: tuple[str, ...] = RAW_FEATURE_NAMES + tuple(f.name for f in TARGET_FIELDS)
LEGACY_V1_FIELDS: tuple[str, ...] = (
    "kv_cache_percentage", "input_token_length", "num_request_waiting", "num_request_running",
    "num_tokens_generated", "prefix_cache_score", "pod_type", "prefill_tokens_in_flight",
    "decode_tokens_in_flight", "encoder_input_size", "encoder_matched_size", "actual_ttft_ms", "actual_tpot_ms",
)
"""The frozen on-disk column order of format-1 records (never edit: it describes files already written)."""
SPEC_DEFAULTS: Mapping[str, float] = {f.name: f.default for f in FEATURE_FIELDS + TARGET_FIELDS}

MAGIC = 0x4C41544C  # "LTAL"
HEADER = struct.Struct("<IBxxxII")
ROWS_HEAD = struct.Struct("<QdII")
NAMES_LEN = struct.Struct("<I")
FLUSH_BODY = struct.Struct("<QBB")
KIND_ROWS = 1
KIND_FLUSH = 2
KIND_ROWS_NAMED = 3
KIND_ROWS_META = 4
META_LEN = struct.Struct("<I")
NO_META: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class Layout:
    """The columns a reader wants, in order, and the value of each one a record lacks."""

    fields: tuple[str, ...] = STORED_FIELDS
    defaults: Mapping[str, float] = field(default_factory=lambda: SPEC_DEFAULTS)

    def adopt(self, names: Sequence[str], columns: np.ndarray) -> np.ndarray:
        """Record columns ``(k, n)`` named ``names`` → ``(n, len(fields))`` in this layout."""
        if tuple(names) == self.fields:
            return columns.T.astype(np.float64)
        where = {name: j for j, name in enumerate(names)}
        out = np.empty((columns.shape[1], len(self.fields)), dtype=np.float64)
        for j, name in enumerate(self.fields):
            out[:, j] = columns[where[name]] if name in where else self.defaults.get(name, 0.0)
        return out


CURRENT = Layout()


@dataclass(frozen=True)
class RowsRecord:
    first_seq: int
    wall_time: float
    matrix: np.ndarray  # (n_rows, len(layout.fields)) float64
    names: tuple[str, ...] = STORED_FIELDS
    """The columns the record held on disk (its layout before mapping)."""
    meta: Mapping[str, Any] = field(default_factory=lambda: NO_META)
    """Facts stored with the rows: which client sent them (``source``), whether they are ``quarantined`` or a
    quarantine release (``release_through_seq``), the ingest ``idempotency_key`` and ``body_sha256``."""

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


def encode_rows(first_seq: int, wall_time: float, matrix: np.ndarray,
                names: Sequence[str] = STORED_FIELDS, meta: Mapping[str, Any] | None = None) -> bytes:
    n, k = matrix.shape
    if k != len(names):
        raise ValueError(f"matrix has {k} columns, layout names {len(names)}")
    label = "\n".join(names).encode()
    body = np.ascontiguousarray(matrix.T, dtype="<f8").tobytes()
    payload = ROWS_HEAD.pack(first_seq, wall_time, n, k) + NAMES_LEN.pack(len(label)) + label + body
    if not meta:
        return _frame(KIND_ROWS_NAMED, payload)
    extra = orjson.dumps(dict(meta))
    return _frame(KIND_ROWS_META, payload + META_LEN.pack(len(extra)) + extra)


def encode_flush(seq: int, flush_train: bool, flush_test: bool) -> bytes:
    return _frame(KIND_FLUSH, FLUSH_BODY.pack(seq, int(flush_train), int(flush_test)))


def _names(payload: bytes, at: int) -> tuple[tuple[str, ...], int] | None:
    if len(payload) < at + NAMES_LEN.size:
        return None
    (size,) = NAMES_LEN.unpack_from(payload, at)
    start = at + NAMES_LEN.size
    try:
        text = payload[start:start + size].decode()
    except UnicodeDecodeError:
        return None
    return tuple(text.split("\n")) if text else (), start + size


def _decode_rows(kind: int, payload: bytes, layout: Layout) -> RowsRecord | None:
    if len(payload) < ROWS_HEAD.size:
        return None
    first_seq, wall, n, k = ROWS_HEAD.unpack_from(payload)
    if kind == KIND_ROWS:
        names, start = LEGACY_V1_FIELDS, ROWS_HEAD.size
    else:
        parsed = _names(payload, ROWS_HEAD.size)
        if parsed is None:
            return None
        names, start = parsed
    end = start + 8 * n * k
    meta = _meta(payload, end) if kind == KIND_ROWS_META else NO_META
    if k != len(names) or len(set(names)) != k or meta is None or (kind != KIND_ROWS_META and len(payload) != end):
        return None
    flat = np.frombuffer(payload, dtype="<f8", offset=start, count=n * k)
    return RowsRecord(first_seq, wall, layout.adopt(names, flat.reshape(k, n)), names, meta)


def _meta(payload: bytes, at: int) -> Mapping[str, Any] | None:
    if len(payload) < at + META_LEN.size:
        return None
    (size,) = META_LEN.unpack_from(payload, at)
    if len(payload) != at + META_LEN.size + size:
        return None
    try:
        meta = orjson.loads(payload[at + META_LEN.size:])
    except orjson.JSONDecodeError:
        return None
    return MappingProxyType(meta) if isinstance(meta, dict) else None


def _decode_payload(kind: int, payload: bytes, layout: Layout) -> Record | None:
    if kind == KIND_FLUSH and len(payload) == FLUSH_BODY.size:
        seq, train, test = FLUSH_BODY.unpack(payload)
        return FlushRecord(seq, bool(train), bool(test))
    if kind in (KIND_ROWS, KIND_ROWS_NAMED, KIND_ROWS_META):
        return _decode_rows(kind, payload, layout)
    return None


def decode_at(buf: bytes | memoryview, offset: int, layout: Layout = CURRENT) -> tuple[Record, int] | None:
    """Decode the record at ``offset`` into ``layout``; ``None`` on a torn or corrupt record (the valid
    log ends there)."""
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
    record = _decode_payload(kind, payload, layout)
    return None if record is None else (record, end)
