"""The durable log: round trip, torn-tail recovery, corruption, retention, flush replay."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest

from trainer.store import STORED_FIELDS, FlushRecord, Layout, LogLimits, RowsRecord, SampleLog, record


def matrix(n: int, start: float = 0.0) -> np.ndarray:
    return np.arange(start, start + n * len(STORED_FIELDS), dtype=np.float64).reshape(n, len(STORED_FIELDS))


def open_log(path: Path, limits: LogLimits | None = None) -> tuple[SampleLog, list]:
    log = SampleLog(path, limits or LogLimits())
    return log, list(log.replay())


def test_append_then_replay_round_trip(tmp_path: Path) -> None:
    log, records = open_log(tmp_path)
    assert records == []
    assert log.append_rows(matrix(3)) == 0
    assert log.append_rows(matrix(2, 1000)) == 3
    log.append_flush(True, False)
    log.close()
    log2, records = open_log(tmp_path)
    assert [type(r) for r in records] == [RowsRecord, RowsRecord, FlushRecord]
    np.testing.assert_array_equal(records[0].matrix, matrix(3))
    np.testing.assert_array_equal(records[1].matrix, matrix(2, 1000))
    assert records[1].first_seq == 3 and records[2] == FlushRecord(5, True, False)
    assert log2.rows == 5 and log2.next_seq == 5
    assert log2.append_rows(matrix(1)) == 5


@pytest.mark.parametrize("cut", [1, 7, 15, 40, -1])
def test_torn_tail_is_truncated_and_log_stays_appendable(tmp_path: Path, cut: int) -> None:
    log, _ = open_log(tmp_path)
    log.append_rows(matrix(4))
    good = log.total_bytes
    log.append_rows(matrix(4, 99))
    log.close()
    (segment,) = tmp_path.glob("seg-*.log")
    data = segment.read_bytes()
    segment.write_bytes(data[: good + (cut if cut > 0 else len(data) - good - 1)])
    log2, records = open_log(tmp_path)
    assert len(records) == 1 and log2.rows == 4 and segment.stat().st_size == good
    log2.append_rows(matrix(2))
    log2.close()
    assert sum(r.n_rows for r in open_log(tmp_path)[1]) == 6


def test_flipped_byte_in_payload_stops_replay_at_that_record(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    log.append_rows(matrix(4))
    good = log.total_bytes
    log.append_rows(matrix(4, 7))
    log.close()
    (segment,) = tmp_path.glob("seg-*.log")
    data = bytearray(segment.read_bytes())
    data[good + 40] ^= 0xFF
    segment.write_bytes(bytes(data))
    assert [r.n_rows for r in open_log(tmp_path)[1]] == [4]


def test_retention_drops_oldest_segments(tmp_path: Path) -> None:
    limits = LogLimits(max_rows=1000, max_bytes=1 << 30)
    log, _ = open_log(tmp_path, limits)
    for i in range(12):
        log.append_rows(matrix(100, i * 10_000))
    assert log.rows <= 1000
    assert len(list(tmp_path.glob("seg-*.log"))) >= 2
    log.close()
    log2, records = open_log(tmp_path, limits)
    assert log2.rows == sum(r.n_rows for r in records) <= 1000
    assert records[-1].first_seq == 1100


def test_retention_by_bytes(tmp_path: Path) -> None:
    limits = LogLimits(max_rows=10**9, max_bytes=1 << 20, segment_max_bytes=1 << 16)
    log, _ = open_log(tmp_path, limits)
    for _ in range(40):
        log.append_rows(matrix(500))
    assert log.total_bytes <= (1 << 20) + (1 << 16)


def test_full_flush_drops_older_segments(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    log.append_rows(matrix(10))
    log.append_flush(True, True)
    assert log.rows == 0
    log.close()
    assert [type(r) for r in open_log(tmp_path)[1]] == [FlushRecord]


def test_rows_survive_a_spec_with_one_more_column(tmp_path: Path) -> None:
    """Upgrading to a feature spec with one more field keeps every stored row (new field = its default)."""
    log, _ = open_log(tmp_path)
    log.append_rows(matrix(3))
    log.append_rows(matrix(2, 500))
    log.close()
    wider = Layout(fields=(*STORED_FIELDS[:-2], "future_field", *STORED_FIELDS[-2:]),
                   defaults={"future_field": 7.0})
    log2 = SampleLog(tmp_path, LogLimits(), wider)
    records = list(log2.replay())
    assert sum(r.n_rows for r in records) == 5 and log2.rows == 5
    got = np.vstack([r.matrix for r in records])
    np.testing.assert_array_equal(got[:, -3], np.full(5, 7.0))
    np.testing.assert_array_equal(np.delete(got, -3, axis=1), np.vstack([matrix(3), matrix(2, 500)]))
    log2.append_rows(np.ones((1, len(wider.fields))))  # new rows carry the new layout ...
    log2.close()
    back = list(SampleLog(tmp_path, LogLimits()).replay())  # ... and a downgrade drops the extra column
    assert sum(r.n_rows for r in back) == 6 and all(r.matrix.shape[1] == len(STORED_FIELDS) for r in back)


def test_spec_1_named_records_get_pod_class_unknown(tmp_path: Path) -> None:
    """Rows stored under feature spec 1 (13 named columns, no pod_class) read as pod_class = 0."""
    old_names = tuple(n for n in STORED_FIELDS if n != "pod_class")
    rows = np.arange(3.0 * len(old_names)).reshape(3, len(old_names))
    (tmp_path / "seg-0000000000000000.log").write_bytes(record.encode_rows(0, 1.0, rows, old_names))
    log, records = open_log(tmp_path)
    assert len(records) == 1 and records[0].names == old_names and log.next_seq == 3
    got = dict(zip(STORED_FIELDS, records[0].matrix.T, strict=True))
    np.testing.assert_array_equal(got["pod_class"], [0.0, 0.0, 0.0])
    for j, name in enumerate(old_names):
        np.testing.assert_array_equal(got[name], rows[:, j])


def test_format_1_records_are_read_with_the_frozen_legacy_layout(tmp_path: Path) -> None:
    rows = np.arange(4.0 * len(record.LEGACY_V1_FIELDS)).reshape(4, len(record.LEGACY_V1_FIELDS))
    body = np.ascontiguousarray(rows.T, dtype="<f8").tobytes()
    payload = record.ROWS_HEAD.pack(0, 1.0, 4, len(record.LEGACY_V1_FIELDS)) + body
    frame = record.HEADER.pack(record.MAGIC, record.KIND_ROWS, len(payload), zlib.crc32(payload)) + payload
    (tmp_path / "seg-0000000000000000.log").write_bytes(frame)
    log, records = open_log(tmp_path)
    assert len(records) == 1 and records[0].names == record.LEGACY_V1_FIELDS
    legacy = dict(zip(record.LEGACY_V1_FIELDS, rows.T, strict=True))
    for j, name in enumerate(STORED_FIELDS):
        np.testing.assert_array_equal(records[0].matrix[:, j], legacy.get(name, np.zeros(4)))
    assert log.next_seq == 4


def test_record_metadata_and_several_records_in_one_write(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    firsts = log.append_batches([(matrix(2), {"source": "10.0.0.7"}), (matrix(3, 50), {"quarantined": True})])
    assert firsts == [0, 2] and log.rows == 5
    log.close()
    _, records = open_log(tmp_path)
    assert [dict(r.meta) for r in records] == [{"source": "10.0.0.7"}, {"quarantined": True}]
    np.testing.assert_array_equal(records[1].matrix, matrix(3, 50))
