"""Request keys the schema does not name: accepted (llm-d compatibility), counted, logged, or refused.

By default an unknown key is ignored as upstream does, but counted per name (``count(name, n)``, a
metric) and logged once per name, so a typo such as ``prefill_token_in_flight`` shows up. In strict
mode (``LATENCY_STRICT_FIELDS``) each occurrence is a 422 ``extra_forbidden`` naming row and field.
The common case costs one C-level set union over the rows. At most ``MAX_NAMES`` distinct names get
their own count (and log line); further names are counted as ``OTHER`` so a client cannot grow the
metric without bound.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from shared.features import RAW_FEATURE_NAMES, TARGET_FIELDS

log = logging.getLogger(__name__)

MAX_NAMES = 100
OTHER = "<other>"
MAX_ERRORS = 1000
Count = Callable[[str, int], None]

INFORMATIONAL = frozenset({"timestamp"})
"""Contract fields that are accepted and never used (the EPP sends ``timestamp``)."""
REQUEST_FIELDS = frozenset(RAW_FEATURE_NAMES) | INFORMATIONAL
TRAINING_FIELDS = REQUEST_FIELDS | {f.name for f in TARGET_FIELDS}


def _extra_forbidden(loc: list[Any], value: Any) -> dict[str, Any]:
    return {"type": "extra_forbidden", "loc": loc, "msg": "Extra inputs are not permitted", "input": value}


class UnknownFields:
    def __init__(self, count: Count, strict: bool, where: str) -> None:
        self._count = count
        self.strict = strict
        self._where = where
        self._named: set[str] = set()
        self._lock = threading.Lock()

    def rows(self, rows: Sequence[Any], known: frozenset[str], root: Sequence[Any]) -> list[dict[str, Any]]:
        """Inspect every object of ``rows``; returns the strict-mode errors (``[]`` otherwise)."""
        try:
            if not set().union(*rows) - known:
                return []
        except TypeError:  # a row that is not an object (validation reports it): look at the objects only
            pass
        objects = [(i, row) for i, row in enumerate(rows) if type(row) is dict]
        errors: list[dict[str, Any]] = []
        found: dict[str, int] = {}
        for i, row in objects:
            for name in row.keys() - known:
                found[name] = found.get(name, 0) + 1
                if self.strict and len(errors) < MAX_ERRORS:
                    errors.append(_extra_forbidden([*root, i, name], row[name]))
        self._record(found)
        return errors

    def keys(self, payload: Any, known: frozenset[str], root: Sequence[Any]) -> list[dict[str, Any]]:
        """Inspect the keys of one object (a single request, a body's top level)."""
        if type(payload) is not dict:
            return []
        extra = payload.keys() - known
        if not extra:
            return []
        self._record(dict.fromkeys(extra, 1))
        return [_extra_forbidden([*root, name], payload[name]) for name in sorted(extra)] if self.strict else []

    def _record(self, found: dict[str, int]) -> None:
        fresh: list[str] = []
        with self._lock:
            for name, n in found.items():
                label = name if isinstance(name, str) and (name in self._named or len(self._named) < MAX_NAMES) \
                    else OTHER
                if label != OTHER and label not in self._named:
                    self._named.add(label)
                    fresh.append(label)
                self._count(label, n)
        for name in fresh:
            log.warning("%s: unknown request field %r (%s); check the client for a typo", self._where, name,
                        "rejected: strict mode" if self.strict else "ignored")


def merge(errors: list[dict[str, Any]], extra: Iterable[dict[str, Any]], limit: int = MAX_ERRORS) -> list[dict]:
    """Validation errors and unknown-field errors in row order (the 422 ``detail`` list)."""
    combined = [*errors, *extra]
    combined.sort(key=lambda e: e["loc"][2] if len(e["loc"]) > 2 and isinstance(e["loc"][2], int) else -1)
    return combined[:limit]
