"""Cluster configuration: pools of pods (each pool with its own engine config) and router knobs."""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.engine.config import EngineConfig
from sim.engine.errors import ConfigError


@dataclass(frozen=True)
class PoolSpec:
    name: str
    count: int
    engine: EngineConfig


@dataclass(frozen=True)
class ClusterConfig:
    pools: tuple[PoolSpec, ...]
    scrape_interval_s: float = 0.05
    """Metrics the policy sees are as of the last scrape tick (0 = always fresh)."""
    router_prefix_blocks: int | None = None
    """Capacity of the router's per-pod prefix index (default: the pod's KV blocks)."""
    fast_forward: bool = True
    expose_output_length: bool = True
    """Whether ``RequestView.expected_output_tokens`` carries the trace's output length."""

    def pod_ids(self) -> list[tuple[str, str]]:
        """``(pod_id, pool)`` pairs; ids are ``<pool>-<i>`` (``pod-<i>`` for a single default pool)."""
        out = []
        for pool in self.pools:
            for i in range(pool.count):
                out.append((f"{pool.name}-{i}", pool.name))
        return out


def single_pool(count: int, engine: EngineConfig, **kwargs: Any) -> ClusterConfig:
    return ClusterConfig(pools=(PoolSpec("pod", count, engine),), **kwargs)


def parse_pools(spec: str, default_preset: str, overrides: dict[str, Any]) -> tuple[PoolSpec, ...]:
    """Parse ``name:count[:preset],...`` (e.g. ``short:6:llama3-8b-a100,long:2``)."""
    pools = []
    for part in spec.split(","):
        fields = part.strip().split(":")
        if len(fields) not in (2, 3) or not fields[1].isdigit():
            raise ConfigError(f"bad pool spec {part!r}; expected name:count[:preset]")
        preset = fields[2] if len(fields) == 3 else default_preset
        pools.append(PoolSpec(fields[0], int(fields[1]), EngineConfig.from_preset(preset, **overrides)))
    _check_unique(pools)
    return tuple(pools)


def load_cluster_file(path: Path) -> tuple[tuple[PoolSpec, ...], dict[str, Any]]:
    """Read ``{"pools": [{"name", "count", "preset", <engine overrides>...}], <cluster keys>}``
    from JSON or TOML (``[[pools]]`` tables). Returns the pools and the remaining cluster keys."""
    text = path.read_text()
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot parse {path}: {exc}") from exc
    raw_pools = data.pop("pools", None)
    if not isinstance(raw_pools, list) or not raw_pools:
        raise ConfigError(f"{path}: 'pools' must be a non-empty list")
    pools = []
    for raw in raw_pools:
        if not isinstance(raw, dict) or "name" not in raw or "count" not in raw:
            raise ConfigError(f"{path}: every pool needs 'name' and 'count'")
        raw = dict(raw)
        name = str(raw.pop("name"))
        count = int(raw.pop("count"))
        preset = raw.pop("preset", "llama3-8b-a100")
        pools.append(PoolSpec(name, count, EngineConfig.from_preset(preset, **raw)))
    _check_unique(pools)
    allowed = {"scrape_interval_s", "router_prefix_blocks", "fast_forward", "expose_output_length"}
    unknown = set(data) - allowed
    if unknown:
        raise ConfigError(f"{path}: unknown cluster keys {sorted(unknown)}")
    return tuple(pools), data


def _check_unique(pools: list[PoolSpec]) -> None:
    names = [p.name for p in pools]
    if len(set(names)) != len(names):
        raise ConfigError(f"duplicate pool names in {names}")
    if any(p.count < 1 for p in pools):
        raise ConfigError("every pool needs at least one pod")
