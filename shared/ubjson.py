"""A UBJSON decoder for XGBoost model files (``.ubj``), so a reader without XGBoost can read a booster.

UBJSON (https://ubjson.org, draft 12) is JSON with binary, big-endian scalars: ``Z`` null, ``T``/``F``, integers
``i`` (int8) ``U`` (uint8) ``I`` (int16) ``l`` (int32) ``L`` (int64), ``d`` (float32) ``D`` (float64), ``C`` char,
``S`` string (a length, then UTF-8), ``H`` high-precision number (a string), ``[`` … ``]`` arrays and ``{`` … ``}``
objects whose keys are strings without the ``S`` marker. A container may be *optimised*: ``$<type>`` then
``#<count>`` (every element of that type, no markers) or ``#<count>`` alone. XGBoost writes its tree arrays as
optimised numeric arrays; those become numpy arrays (``np.frombuffer`` of the big-endian block: no per-element
work). ``N`` (no-op) is skipped. Anything else raises ``ValueError``: the decoder never executes what it reads.
"""

from __future__ import annotations

from typing import Any

import numpy as np

SCALARS = {b"i": ">i1", b"U": ">u1", b"I": ">i2", b"l": ">i4", b"L": ">i8", b"d": ">f4", b"D": ">f8"}
MAX_DEPTH = 64


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = memoryview(data), 0

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"UBJSON truncated at byte {self.pos}")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def marker(self) -> bytes:
        while True:
            byte = bytes(self.take(1))
            if byte != b"N":
                return byte

    def scalar(self, marker: bytes) -> Any:
        dtype = np.dtype(SCALARS[marker])
        return np.frombuffer(self.take(dtype.itemsize), dtype)[0].item()

    def length(self) -> int:
        marker = self.marker()
        if marker not in SCALARS or marker in (b"d", b"D"):
            raise ValueError(f"UBJSON length must be an integer, not {marker!r}")
        n = int(self.scalar(marker))
        if n < 0:
            raise ValueError("UBJSON negative length")
        return n

    def string(self) -> str:
        return bytes(self.take(self.length())).decode("utf-8")

    def value(self, marker: bytes, depth: int) -> Any:
        if marker in SCALARS:
            return self.scalar(marker)
        if marker in (b"S", b"H"):
            return self.string()
        if marker == b"C":
            return bytes(self.take(1)).decode("ascii")
        if marker in (b"T", b"F", b"Z"):
            return {b"T": True, b"F": False, b"Z": None}[marker]
        if depth > MAX_DEPTH:
            raise ValueError("UBJSON nested too deeply")
        if marker == b"[":
            return self.array(depth + 1)
        if marker == b"{":
            return self.object(depth + 1)
        raise ValueError(f"UBJSON marker {marker!r} at byte {self.pos - 1}")

    def _header(self) -> tuple[bytes | None, int | None, bytes | None]:
        """(element type, count, first marker) of a container: ``$t#n``, ``#n`` or neither."""
        marker = self.marker()
        kind = None
        if marker == b"$":
            kind = self.marker()
            if self.marker() != b"#":
                raise ValueError("UBJSON typed container without a count")
            return kind, self.length(), None
        if marker == b"#":
            return None, self.length(), None
        return None, None, marker

    def array(self, depth: int) -> Any:
        kind, count, first = self._header()
        if count is None:
            out, marker = [], first
            while marker != b"]":
                assert marker is not None
                out.append(self.value(marker, depth))
                marker = self.marker()
            return out
        if kind in SCALARS:
            dtype = np.dtype(SCALARS[kind])
            return np.frombuffer(self.take(count * dtype.itemsize), dtype).astype(dtype.newbyteorder("="))
        return [self.value(kind or self.marker(), depth) for _ in range(count)]

    def object(self, depth: int) -> dict[str, Any]:
        kind, count, first = self._header()
        out: dict[str, Any] = {}
        if count is None:
            marker = first
            while marker != b"}":
                self.pos -= 1  # the key's length marker was read as ``marker``
                key = self.string()
                out[key] = self.value(self.marker(), depth)
                marker = self.marker()
            return out
        for _ in range(count):
            key = self.string()
            out[key] = self.value(kind or self.marker(), depth)
        return out


def loads(data: bytes) -> Any:
    """The value ``data`` holds (objects → dict, optimised numeric arrays → numpy arrays); ``ValueError`` if it
    is not well-formed UBJSON or has bytes after the value."""
    reader = _Reader(data)
    try:
        value = reader.value(reader.marker(), 0)
    except (UnicodeDecodeError, KeyError) as exc:
        raise ValueError(f"UBJSON: {exc}") from None
    if reader.pos != len(reader.data):
        raise ValueError(f"UBJSON: {len(reader.data) - reader.pos} bytes after the value")
    return value
