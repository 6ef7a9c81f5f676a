"""Axis scales for the server-side SVG charts: data → pixels, and readable tick values.

Linear scales get "nice" ticks (1, 2, 2.5, 5 × 10^k steps); log scales get the powers of ten in range
(plus 2 and 5 multiples when the range spans under 2.5 decades). Pure functions, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

_STEPS = (1.0, 2.0, 2.5, 5.0, 10.0)


def finite(values: Iterable[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(v)]


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About ``count`` round values covering ``[lo, hi]``."""
    if not hi > lo:
        return [lo]
    raw = (hi - lo) / max(1, count)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(s * power for s in _STEPS if s * power >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    value = first
    while value <= hi + step * 1e-9:
        ticks.append(0.0 if abs(value) < step * 1e-9 else round(value, 12))
        value += step
    return ticks


def log_ticks(lo: float, hi: float) -> list[float]:
    """Powers of ten within ``[lo, hi]`` (with 2× and 5× when the range spans under 2.5 decades)."""
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    mults = (1.0, 2.0, 5.0) if math.log10(hi / lo) < 2.5 else (1.0,)
    ticks = [m * 10.0 ** e for e in range(first, last + 1) for m in mults]
    inside = [t for t in ticks if lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9)]
    if len(inside) < 3:  # under one decade: round linear values read better than one lonely power of ten
        inside = [t for t in nice_ticks(lo, hi, 6) if t > 0]
    return inside or [lo, hi]


class Scale:
    """Maps ``[lo, hi]`` onto pixels ``[p0, p1]`` (``p1 < p0`` for a y axis), linear or log10."""

    __slots__ = ("lo", "hi", "p0", "p1", "log", "_a", "_b", "_low", "_high")

    def __init__(self, lo: float, hi: float, p0: float, p1: float, log: bool = False) -> None:
        self.lo, self.hi, self.p0, self.p1, self.log = lo, hi, p0, p1, log
        a, b = (math.log10(lo), math.log10(hi)) if log else (lo, hi)
        span = b - a
        self._a = 0.0 if span == 0 else (p1 - p0) / span  # pixels per unit
        self._b = (p0 + p1) / 2 if span == 0 else p0 - a * self._a
        edge = 0.05 * (p1 - p0)  # points beyond the range are drawn just outside the frame, not far away
        self._low, self._high = min(p0 - edge, p1 + edge), max(p0 - edge, p1 + edge)

    def __call__(self, value: float) -> float:
        v = math.log10(max(value, self.lo)) if self.log else value
        return min(max(self._a * v + self._b, self._low), self._high)

    def ticks(self, count: int = 5) -> list[float]:
        return log_ticks(self.lo, self.hi) if self.log else nice_ticks(self.lo, self.hi, count)


def extent(values: Sequence[float], log: bool = False, include_zero: bool = False,
           pad: float = 0.05) -> tuple[float, float]:
    """A padded data range for an axis (positive-only for log axes; never empty)."""
    data = [v for v in values if v > 0] if log else list(values)
    if not data:
        return (1.0, 10.0) if log else (0.0, 1.0)
    lo, hi = min(data), max(data)
    if log:
        lo, hi = (lo / 1.5, hi * 1.5) if hi / lo > 1.01 else (lo / 2, hi * 2)
        return lo, hi
    if include_zero:
        lo, hi = min(lo, 0.0), max(hi, 0.0)
    if hi == lo:
        return (lo - 1.0, hi + 1.0) if lo == 0 else (lo - abs(lo) * 0.1, hi + abs(hi) * 0.1)
    span = hi - lo
    return (lo if include_zero and lo == 0 else lo - span * pad), hi + span * pad


def fmt(value: float) -> str:
    """Compact axis/label number: 0.0123, 1.5, 250, 12k, 3.4M."""
    a = abs(value)
    if a == 0:
        return "0"
    if a >= 1e6:
        return f"{value / 1e6:.3g}M"
    if a >= 1e4:
        return f"{value / 1e3:.3g}k"
    if a >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"
