"""JSON nesting depth of a parsed request body, checked without walking it in the common case.

orjson refuses anything deeper than 1024 levels by itself. Below that, the configured limit is checked
exactly but cheaply: the containers at depth ≤ 3 are counted from the parsed value (the top level, its
children and, C-speed, its grandchildren's types), and compared with the number of ``[`` and ``{``
bytes in the raw body, which can only be larger (more containers, or brackets inside strings). When
both agree there is no container below depth 3, so the body is within any limit ≥ 3 — every valid
request has this shape. Otherwise (brackets in strings, nested values) the value is walked
iteratively, stopping as soon as the limit is passed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shared.errors import RequestValidationFailed

SHALLOW = 3
ORJSON_MAX_DEPTH = 1024
NUMPY_FROM_BYTES = 4096
"""Bodies from this size on are scanned with numpy (one vectorised pass; ``bytes.count`` twice is slower)."""


def too_deep(limit: int) -> RequestValidationFailed:
    return RequestValidationFailed([{
        "type": "json_too_deep", "loc": ["body"], "input": None, "ctx": {"max_depth": limit},
        "msg": f"JSON nesting exceeds the limit of {limit} levels"}])


def _children(value: Any) -> Any:
    kind = type(value)
    return value.values() if kind is dict else value if kind is list else None


def _shallow_containers(value: Any) -> int:
    """Containers at depth 1, 2 and 3 of ``value``."""
    children = _children(value)
    if children is None:
        return 0
    count = 1
    for child in children:
        grand = _children(child)
        if grand is not None:
            kinds = list(map(type, grand))
            count += 1 + kinds.count(dict) + kinds.count(list)
    return count


def deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests more than ``limit`` containers deep (iterative; stops early)."""
    if _children(value) is None:
        return False
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        for child in _children(node):
            if type(child) in (dict, list):
                stack.append((child, depth + 1))
    return False


def openers(body: bytes) -> int:
    """Number of ``[`` and ``{`` bytes (0x5B, 0x7B: the only bytes equal to 0x7B once bit 0x20 is set)."""
    if len(body) < NUMPY_FROM_BYTES:
        return body.count(b"[") + body.count(b"{")
    return int(np.count_nonzero((np.frombuffer(body, dtype=np.uint8) | 0x20) == 0x7B))


def check_depth(value: Any, body: bytes, limit: int) -> None:
    """Raise 422 ``json_too_deep`` when ``value`` (parsed from ``body``) nests deeper than ``limit``."""
    if limit >= ORJSON_MAX_DEPTH:
        return
    if limit >= SHALLOW and openers(body) == _shallow_containers(value):
        return
    if deeper_than(value, limit):
        raise too_deep(limit)
