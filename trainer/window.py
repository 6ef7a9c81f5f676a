"""The training window: per model, a stratified train store and a holdout of the newest rows.

Rows live in numpy arrays (``STORED_FIELDS`` columns), never in per-row Python objects.
A row feeds TTFT iff ``actual_ttft_ms > 0`` and TPOT iff ``actual_tpot_ms > 0`` (contract §2.2).

* Holdout: the most recent rows by sequence number — ``min(max_test, ratio × rows)`` of them —
  deterministic and time-ordered (no hashing). Rows leave it, oldest first, into the train store.
* Train store: stratified over (queue, cache, prefix) buckets (contract §5) with at most
  ``cap`` rows per bucket and ``total`` rows in all, newest preferred. The total is
  *water-filled*: the per-bucket limit is lowered just enough that the buckets fit, so the most
  crowded buckets give up their oldest rows first and rare regimes (deep queues, cache hits) keep
  what they have. Appends are O(rows); the trim runs lazily (amortised) and before every snapshot.
  Counts are always exact.

Every row carries the wall time it was stored at (``wall``): the fit weighs recent rows more.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import numpy as np

from shared.features import MODEL_NAMES, TARGET_OF, cache_bucket, prefix_bucket, queue_bucket
from trainer.store.record import STORED_FIELDS

COL = {name: j for j, name in enumerate(STORED_FIELDS)}
N_QUEUE, N_CACHE, N_PREFIX = 5, 20, 4
N_BUCKETS = N_QUEUE * N_CACHE * N_PREFIX


def bucket_ids(matrix: np.ndarray) -> np.ndarray:
    """Bucket id ``q*80 + c*4 + p`` of every row."""
    q = queue_bucket(matrix[:, COL["num_request_waiting"]])
    c = cache_bucket(matrix[:, COL["kv_cache_percentage"]])
    p = prefix_bucket(matrix[:, COL["prefix_cache_score"]])
    return (q * (N_CACHE * N_PREFIX) + c * N_PREFIX + p).astype(np.int64)


def bucket_triplet(bucket: int) -> tuple[int, int, int]:
    q, rest = divmod(bucket, N_CACHE * N_PREFIX)
    c, p = divmod(rest, N_PREFIX)
    return q, c, p


@dataclass(frozen=True)
class Rows:
    """An immutable slab of rows: data (n, k) float64, sequence numbers, bucket ids and wall times."""

    data: np.ndarray
    seq: np.ndarray
    bucket: np.ndarray
    wall: np.ndarray

    @staticmethod
    def empty() -> Rows:
        return Rows(np.empty((0, len(STORED_FIELDS))), np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0))

    def __len__(self) -> int:
        return len(self.seq)

    def take(self, index: np.ndarray | slice) -> Rows:
        return Rows(self.data[index], self.seq[index], self.bucket[index], self.wall[index])

    @staticmethod
    def concat(parts: list[Rows]) -> Rows:
        if len(parts) == 1:
            return parts[0]
        return Rows(np.concatenate([p.data for p in parts]), np.concatenate([p.seq for p in parts]),
                    np.concatenate([p.bucket for p in parts]), np.concatenate([p.wall for p in parts]))

    def column(self, name: str) -> np.ndarray:
        return self.data[:, COL[name]]


def bucket_limit(counts: np.ndarray, cap: int, total: int) -> int:
    """The largest per-bucket limit ``L ≤ cap`` with ``Σ min(count, L) ≤ total`` (water-filling)."""
    if int(np.minimum(counts, cap).sum()) <= total:
        return cap
    ordered = np.sort(counts[counts > 0])
    below = np.concatenate([[0], np.cumsum(ordered)[:-1]])  # rows in the buckets smaller than each one
    fits = below + ordered * (len(ordered) - np.arange(len(ordered)))  # Σ min(count, ordered[i])
    i = int(np.searchsorted(fits, total, side="right"))  # first bucket whose own size cannot be the limit
    rest = len(ordered) - i
    return max(1, min(cap, int((total - below[i]) // rest))) if rest else cap


def newest_per_bucket(rows: Rows, cap: int) -> Rows:
    """Keep the ``cap`` newest rows of every bucket, returned in sequence order."""
    order = np.lexsort((-rows.seq, rows.bucket))
    sorted_buckets = rows.bucket[order]
    starts = np.searchsorted(sorted_buckets, sorted_buckets, side="left")
    keep = order[(np.arange(len(order)) - starts) < cap]
    return rows.take(np.sort(keep))


class ModelWindow:
    """Train store + holdout of one model. Not thread-safe by itself (``Window`` locks)."""

    def __init__(self, cap: int, ratio: float, max_test: int, total: int = 100_000) -> None:
        self.cap, self.ratio, self.max_test, self.total = cap, ratio, max_test, total
        self._train: list[Rows] = []
        self._pending = 0
        self._counts = np.zeros(N_BUCKETS, np.int64)
        self._holdout = Rows.empty()
        self.rows_added = 0

    @property
    def limit(self) -> int:
        """Rows kept per bucket now (the cap, lowered by water-filling when the total is reached)."""
        return bucket_limit(self._counts, self.cap, self.total)

    @property
    def train_rows(self) -> int:
        return int(self.bucket_counts().sum())

    @property
    def holdout_rows(self) -> int:
        return len(self._holdout)

    def bucket_counts(self) -> np.ndarray:
        return np.minimum(self._counts, self.limit)

    def add(self, rows: Rows) -> None:
        self.rows_added += len(rows)
        holdout = Rows.concat([self._holdout, rows]) if len(self._holdout) else rows
        total = self.train_rows + len(holdout)
        target = min(self.max_test, math.floor(self.ratio * total))
        overflow = len(holdout) - target
        if overflow > 0:
            self._to_train(holdout.take(slice(0, overflow)))
            holdout = holdout.take(slice(overflow, None))
        self._holdout = holdout

    def _to_train(self, rows: Rows) -> None:
        self._train.append(rows)
        self._counts += np.bincount(rows.bucket, minlength=N_BUCKETS)
        self._pending += len(rows)
        if self._pending > max(20_000, self.total // 2):
            self._compact()

    def _compact(self) -> None:
        if not self._train:
            return
        merged = newest_per_bucket(Rows.concat(self._train), self.limit)
        self._train = [merged]
        self._counts = np.bincount(merged.bucket, minlength=N_BUCKETS).astype(np.int64)
        self._pending = 0

    def snapshot(self) -> tuple[Rows, Rows]:
        """(train, holdout), both in sequence order; arrays are never mutated afterwards."""
        self._compact()
        return (self._train[0] if self._train else Rows.empty()), self._holdout

    def newest(self, n: int) -> Rows:
        """The newest ``n`` rows (holdout first, then the newest train rows), oldest first; no compaction."""
        parts, need = [self._holdout.take(slice(max(0, len(self._holdout) - n), None))], n - len(self._holdout)
        for piece in reversed(self._train):
            if need <= 0:
                break
            parts.insert(0, piece.take(slice(max(0, len(piece) - need), None)))
            need -= len(piece)
        return Rows.concat([p for p in parts if len(p)] or [Rows.empty()])

    def flush(self, train: bool, test: bool) -> tuple[int, int]:
        counts = (self.train_rows if train else 0, self.holdout_rows if test else 0)
        if train:
            self._train, self._pending = [], 0
            self._counts = np.zeros(N_BUCKETS, np.int64)
        if test:
            self._holdout = Rows.empty()
        return counts


class Window:
    """Both models' windows behind one lock."""

    def __init__(self, cap: int, ratio: float, max_test: int, total: int = 100_000) -> None:
        self._lock = threading.Lock()
        self.models = {name: ModelWindow(cap, ratio, max_test, total) for name in MODEL_NAMES}

    def add(self, first_seq: int, matrix: np.ndarray, wall_time: float) -> None:
        seq = np.arange(first_seq, first_seq + len(matrix), dtype=np.int64)
        buckets = bucket_ids(matrix)
        wall = np.full(len(matrix), wall_time)
        with self._lock:
            for name, model in self.models.items():
                mask = matrix[:, COL[TARGET_OF[name]]] > 0
                if mask.any():
                    model.add(Rows(matrix[mask], seq[mask], buckets[mask], wall[mask]))

    def snapshot(self, name: str) -> tuple[Rows, Rows]:
        with self._lock:
            return self.models[name].snapshot()

    def newest(self, name: str, n: int) -> Rows:
        with self._lock:
            return self.models[name].newest(n)

    def flush(self, train: bool, test: bool) -> dict[str, tuple[int, int]]:
        with self._lock:
            return {name: model.flush(train, test) for name, model in self.models.items()}

    def rows_added(self, name: str) -> int:
        return self.models[name].rows_added

    def counts(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {name: {"train": m.train_rows, "test": m.holdout_rows,
                           "noqueue": int(m.bucket_counts()[: N_CACHE * N_PREFIX].sum()),
                           "queued": int(m.bucket_counts()[N_CACHE * N_PREFIX:].sum())}
                    for name, m in self.models.items()}

    def bucket_counts(self, name: str) -> np.ndarray:
        with self._lock:
            return self.models[name].bucket_counts()
