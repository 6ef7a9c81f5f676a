"""The durable log: round trip, torn-tail recovery, corruption, retention, flush replay."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trainer.store import STORED_FIELDS, FlushRecord, LogLimits, RowsRecord, SampleLog


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
