"""Linear-layer step-time table from a vidur MLP profile (TP=1 rows, median per op, x layers)."""

from __future__ import annotations

import csv
from functools import lru_cache
from pathlib import Path

import numpy as np

from sim.engine.errors import ConfigError

OP_SUFFIX = ".median"


def load_profile_points(path: Path, n_layers: int) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(num_tokens, ms_per_step)`` sorted by tokens, for tensor-parallel degree 1."""
    if not path.is_file():
        raise ConfigError(f"step-time profile not found: {path}")
    sums: dict[int, list[float]] = {}
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        fields = reader.fieldnames or []
        ops = [f for f in fields if f.startswith("time_stats.") and f.endswith(OP_SUFFIX)]
        if not ops:
            raise ConfigError(f"{path} has no time_stats.*.median columns")
        for row in reader:
            if row.get("num_tensor_parallel_workers", "1") != "1":
                continue
            n = int(row["num_tokens"])
            sums.setdefault(n, []).append(sum(float(row[op]) for op in ops))
    tokens = np.array(sorted(sums), dtype=np.float64)
    per_layer = np.array([np.mean(sums[int(n)]) for n in tokens])
    return tokens, per_layer * n_layers


@lru_cache(maxsize=8)
def linear_table(path: Path, n_layers: int, max_tokens: int) -> tuple[float, ...]:
    """Milliseconds of linear layers for 0..max_tokens batch tokens (index = tokens).

    Interpolated on the measured points; beyond the last point extrapolated at the throughput of
    the last two points (the profile saturates, so this is linear in tokens).
    """
    tokens, ms = load_profile_points(path, n_layers)
    grid = np.arange(max_tokens + 1, dtype=np.float64)
    table = np.interp(grid, tokens, ms)
    last_n, last_ms = tokens[-1], ms[-1]
    if max_tokens > last_n:
        half = int(np.searchsorted(tokens, last_n / 2))
        slope = (ms[-1] - ms[half]) / (last_n - tokens[half])
        beyond = grid > last_n
        table[beyond] = last_ms + slope * (grid[beyond] - last_n)
    table[0] = 0.0
    return tuple(float(x) for x in table)
