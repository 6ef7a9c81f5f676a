"""Idempotent ingest: a retried batch with the same ``Idempotency-Key`` is stored once, acknowledged again.

The key and the sha256 of the request (body + mode) travel inside the durable rows record
(``store.record.KIND_ROWS_META``): one write, one fdatasync, so a crash between storing and
acknowledging cannot lose the key — replay restores it. A retry with a remembered key and the same
body is validated again (deterministic, so the 202 body is the same) and not stored; the same key
with another body is a 422. Keys are remembered for a bounded window: the newest ``capacity`` keys,
each for ``ttl_s`` seconds. A batch that stored nothing (all rows rejected or discarded) leaves no
key: its retry stores nothing again either.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from shared.errors import RequestValidationFailed

HEADER = "Idempotency-Key"
MAX_KEY_CHARS = 255
META_KEY, META_DIGEST = "idempotency_key", "body_sha256"


def _invalid(key: str, why: str) -> RequestValidationFailed:
    return RequestValidationFailed([{"type": "value_error", "loc": ["header", HEADER], "input": key[:MAX_KEY_CHARS],
                                     "msg": f"Value error, {HEADER} {why}"}])


def check_key(value: str | None) -> str | None:
    """The header's key (1–255 visible ASCII characters), None when absent; 422 naming the header otherwise."""
    if value is None:
        return None
    if not 0 < len(value) <= MAX_KEY_CHARS or not all("!" <= ch <= "~" for ch in value):
        raise _invalid(value, f"must be 1-{MAX_KEY_CHARS} visible ASCII characters")
    return value


def request_digest(body: bytes, partial: bool) -> str:
    return hashlib.sha256(b"partial=%d\n" % partial + body).hexdigest()


class IdempotencyKeys:
    """Thread-safe memory of (key → digest, stored at) for the newest ``capacity`` keys within ``ttl_s``."""

    def __init__(self, capacity: int, ttl_s: float, clock: Callable[[], float] = time.time) -> None:
        self.capacity = capacity
        self.ttl_s = ttl_s
        self._clock = clock
        self._keys: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._keys)

    def seen(self, key: str, digest: str) -> bool:
        """True when ``key`` was stored with this digest in the window; 422 when it came with another body."""
        with self._lock:
            entry = self._keys.get(key)
            if entry is None or self._clock() - entry[1] > self.ttl_s:
                return False
        if entry[0] != digest:
            raise _invalid(key, "was already used for a different request body")
        return True

    def remember(self, key: str, digest: str, at: float | None = None) -> None:
        if self.capacity <= 0:
            return
        at = self._clock() if at is None else at
        if self._clock() - at > self.ttl_s:
            return
        with self._lock:
            self._keys[key] = (digest, at)
            self._keys.move_to_end(key)
            while len(self._keys) > self.capacity:
                self._keys.popitem(last=False)

    def restore(self, meta: Mapping[str, Any], at: float) -> None:
        """Re-learn a key from a replayed record's meta (no-op for records without one)."""
        key, digest = meta.get(META_KEY), meta.get(META_DIGEST)
        if isinstance(key, str) and isinstance(digest, str):
            self.remember(key, digest, at)


def record_meta(key: str | None, digest: str | None) -> dict[str, str] | None:
    return None if key is None or digest is None else {META_KEY: key, META_DIGEST: digest}
