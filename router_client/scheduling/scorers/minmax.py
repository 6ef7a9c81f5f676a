"""Min-max normalisation shared by the count scorers: the smallest count scores 1, the largest 0."""

from __future__ import annotations

from collections.abc import Sequence


def fewest_best(counts: Sequence[float]) -> list[float]:
    """(max − n) / (max − min) per count; all equal (or none) → 1 for every one."""
    low, high = min(counts, default=0), max(counts, default=0)
    if high == low:
        return [1.0] * len(counts)
    return [(high - n) / (high - low) for n in counts]
