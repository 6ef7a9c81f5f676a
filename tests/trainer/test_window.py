"""The training window: target routing, newest-slice holdout, per-bucket caps, flush."""

from __future__ import annotations

import numpy as np

from trainer.store import STORED_FIELDS
from trainer.window import COL, Window, bucket_ids, bucket_triplet


def rows(n: int, ttft: float = 10.0, tpot: float = 0.0, waiting: float = 0.0, kv: float = 0.0) -> np.ndarray:
    m = np.zeros((n, len(STORED_FIELDS)))
    m[:, COL["actual_ttft_ms"]] = ttft
    m[:, COL["actual_tpot_ms"]] = tpot
    m[:, COL["num_request_waiting"]] = waiting
    m[:, COL["kv_cache_percentage"]] = kv
    m[:, COL["input_token_length"]] = np.arange(n)
    return m


def test_rows_feed_models_by_positive_target() -> None:
    w = Window(cap=1000, ratio=0.1, max_test=100)
    w.add(0, rows(10, ttft=5, tpot=0), 0.0)
    w.add(10, rows(5, ttft=0, tpot=3), 0.0)
    w.add(15, rows(2, ttft=1, tpot=1), 0.0)
    c = w.counts()
    assert c["ttft"]["train"] + c["ttft"]["test"] == 12
    assert c["tpot"]["train"] + c["tpot"]["test"] == 7


def test_holdout_is_the_newest_slice() -> None:
    w = Window(cap=10_000, ratio=0.1, max_test=50)
    for i in range(10):
        w.add(i * 100, rows(100), 0.0)
    train, holdout = w.snapshot("ttft")
    assert len(holdout) == 50 and len(train) == 950
    assert holdout.seq.min() > train.seq.max()
    np.testing.assert_array_equal(holdout.seq, np.arange(950, 1000))


def test_bucket_cap_keeps_newest_rows() -> None:
    w = Window(cap=30, ratio=0.1, max_test=5)
    w.add(0, rows(100, waiting=0, kv=0.0), 0.0)
    w.add(100, rows(100, waiting=20, kv=0.99), 0.0)
    assert w.counts()["ttft"]["train"] == 60
    train, _ = w.snapshot("ttft")
    assert len(train) == 60
    for bucket in np.unique(train.bucket):
        assert (train.bucket == bucket).sum() == 30
    low = train.seq[train.bucket == 0]
    np.testing.assert_array_equal(low, np.arange(70, 100))  # the 30 newest of bucket 0
    assert np.all(np.diff(train.seq) > 0)


def test_counts_exact_before_lazy_compaction() -> None:
    w = Window(cap=10, ratio=0.1, max_test=1)
    for i in range(50):
        w.add(i * 10, rows(10), 0.0)
    assert w.counts()["ttft"]["train"] == 10
    assert len(w.snapshot("ttft")[0]) == 10


def test_flush_parts() -> None:
    w = Window(cap=1000, ratio=0.5, max_test=100)
    w.add(0, rows(20, ttft=1, tpot=1), 0.0)
    flushed = w.flush(train=True, test=False)
    assert flushed["ttft"] == (10, 0)
    c = w.counts()
    assert c["ttft"]["train"] == 0 and c["ttft"]["test"] == 10


def test_bucket_ids_match_contract_triplets() -> None:
    m = rows(3)
    m[:, COL["num_request_waiting"]] = [0, 4, 11]
    m[:, COL["kv_cache_percentage"]] = [0.0, 0.5, 1.0]
    m[:, COL["prefix_cache_score"]] = [0.0, 0.5, 1.0]
    assert [bucket_triplet(int(b)) for b in bucket_ids(m)] == [(0, 0, 0), (2, 10, 2), (4, 19, 3)]
