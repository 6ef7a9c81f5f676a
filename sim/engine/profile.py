"""Token-indexed step-time tables from the vidur profiles (linear layers, all-reduce).

Linear layers: one profile row = one layer's ops on one GPU (one tensor-parallel shard) for
``num_tokens`` batch tokens. A step costs ``n_layers x scale x sum(per-layer op medians)`` plus the
embedding lookup once (``emb`` is per model, not per layer). ``scale`` converts a sibling
architecture's profile (see :class:`sim.engine.hardware.ProfileSpec`).

All-reduce: with tensor parallelism each layer does two all-reduces (attention output, MLP
output) of ``num_tokens x hidden x dtype_bytes`` bytes; times come from the measured NCCL table
(single-node rows, ``devices_per_node == num_workers``), interpolated on message size.
"""

from __future__ import annotations

import csv
from functools import lru_cache
from pathlib import Path

import numpy as np

from sim.engine.errors import ConfigError

OP_SUFFIX = ".median"
EMBEDDING_OP = "time_stats.emb.median"


def _tp_of(row: dict[str, str]) -> int:
    return int(row.get("num_tensor_parallel_workers") or 1)


def load_profile_points(
    path: Path, n_layers: int, tp: int = 1, scale: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(num_tokens, linear ms per step)`` sorted by tokens for tensor-parallel degree ``tp``."""
    if not path.is_file():
        raise ConfigError(f"step-time profile not found: {path}")
    layer: dict[int, list[float]] = {}
    emb: dict[int, list[float]] = {}
    seen_tp: set[int] = set()
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        fields = reader.fieldnames or []
        ops = [f for f in fields if f.startswith("time_stats.") and f.endswith(OP_SUFFIX) and f != EMBEDDING_OP]
        if not ops:
            raise ConfigError(f"{path} has no time_stats.*.median columns")
        for row in reader:
            seen_tp.add(_tp_of(row))
            if _tp_of(row) != tp:
                continue
            n = int(row["num_tokens"])
            layer.setdefault(n, []).append(sum(float(row[op]) for op in ops))
            emb.setdefault(n, []).append(float(row.get(EMBEDDING_OP) or 0.0))
    if not layer:
        raise ConfigError(f"{path.name} has no rows for tensor_parallel_size={tp} "
                          f"(has: {', '.join(map(str, sorted(seen_tp)))})")
    tokens = np.array(sorted(layer), dtype=np.float64)
    per_layer = np.array([np.mean(layer[int(n)]) for n in tokens])
    once = np.array([np.mean(emb[int(n)]) for n in tokens])
    return tokens, per_layer * n_layers * scale + once


def load_all_reduce_points(path: Path, tp: int) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(message bytes, ms)`` of single-node all-reduces among ``tp`` GPUs."""
    if not path.is_file():
        raise ConfigError(f"all-reduce profile not found: {path}")
    points: dict[int, list[float]] = {}
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            if row["collective"] != "all_reduce" or int(row["num_workers"]) != tp:
                continue
            if int(row["devices_per_node"]) != tp:
                continue
            points.setdefault(int(row["size"]), []).append(float(row["time_stats.all_reduce.median"]))
    if not points:
        raise ConfigError(f"{path.name} has no single-node all-reduce rows for tensor_parallel_size={tp}")
    sizes = np.array(sorted(points), dtype=np.float64)
    return sizes, np.array([np.mean(points[int(s)]) for s in sizes])


def _extend(grid: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Interpolate on the points; beyond the last one continue at the slope of the upper half."""
    out = np.interp(grid, xs, ys)
    last = xs[-1]
    beyond = grid > last
    if beyond.any():
        half = int(np.searchsorted(xs, last / 2))
        slope = (ys[-1] - ys[half]) / (last - xs[half])
        out[beyond] = ys[-1] + slope * (grid[beyond] - last)
    return out


@lru_cache(maxsize=32)
def linear_table(path: Path, n_layers: int, max_tokens: int, tp: int = 1, scale: float = 1.0) -> tuple[float, ...]:
    """Milliseconds of linear layers for 0..max_tokens batch tokens (index = tokens).

    Interpolated on the measured points; beyond the last point extrapolated at the throughput of
    the upper half of the points (the profile saturates, so this is linear in tokens).
    """
    tokens, ms = load_profile_points(path, n_layers, tp, scale)
    table = _extend(np.arange(max_tokens + 1, dtype=np.float64), tokens, ms)
    table[0] = 0.0
    return tuple(float(x) for x in table)


@lru_cache(maxsize=32)
def all_reduce_table(path: Path, tp: int, n_layers: int, bytes_per_token: int, max_tokens: int) -> tuple[float, ...]:
    """Milliseconds of the ``2 x n_layers`` all-reduces of a step, for 0..max_tokens batch tokens."""
    sizes, ms = load_all_reduce_points(path, tp)
    grid = np.arange(max_tokens + 1, dtype=np.float64) * bytes_per_token
    table = 2 * n_layers * _extend(grid, sizes, ms)
    table[0] = 0.0
    return tuple(float(x) for x in table)
