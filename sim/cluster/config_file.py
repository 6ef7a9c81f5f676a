"""Read a cluster file (``--cluster-config``, TOML or JSON).

```toml
scrape_interval_s = 0.05          # cluster keys: see ClusterConfig
[[pools]]
name = "pod"
max_model_len = 8192              # engine keys here apply to every group of the pool
[[pools.groups]]                  # a mixed pool: pods of different presets, ids pod-0 .. pod-7
count = 4
preset = "llama3-8b-a100"
[[pools.groups]]
count = 4
preset = "llama3-8b-h100"
pod_class = "h100"                # default: the preset name
```

A pool may carry a ``role`` (``prefill``, ``decode``, ``both``; default none: aggregated) for prefill/decode
disaggregation, and the cluster keys ``kv_link_gbps`` / ``kv_link_latency_ms`` set the KV link
(:mod:`sim.cluster.disagg`).

A pool without ``groups`` takes ``count`` (and optionally ``preset`` / ``pod_class``) directly.
Engine keys: :data:`sim.engine.config.FILE_KEYS`. Unknown keys and wrong types fail, naming the
pool (and group) and the key.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sim.cluster.config import PodGroupSpec, PoolSpec, check_unique
from sim.engine.config import EngineConfig, check_file_overrides
from sim.engine.errors import ConfigError

CLUSTER_KEYS = {"scrape_interval_s": float, "router_prefix_blocks": int, "fast_forward": bool,
                "expose_output_length": bool, "kv_link_gbps": float, "kv_link_latency_ms": float}
DEFAULT_PRESET = "llama3-8b-a100"


def _take(raw: dict[str, Any], key: str, kind: type, where: str, default: Any = None) -> Any:
    if key not in raw:
        if default is None:
            raise ConfigError(f"{where}: {key!r} is required")
        return default
    value = raw.pop(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigError(f"{where}: {key!r} must be {kind.__name__}, got {value!r}")
    return value


def _group(raw: Any, where: str, preset: str, base: Mapping[str, Any]) -> PodGroupSpec:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must be a table")
    raw = dict(raw)
    count = _take(raw, "count", int, where)
    preset = _take(raw, "preset", str, where, preset)
    pod_class = _take(raw, "pod_class", str, where, "")
    overrides = {**base, **check_file_overrides(raw, where)}
    try:
        engine = EngineConfig.from_preset(preset, **overrides)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    return PodGroupSpec(count, engine, pod_class)


def _pool(raw: Any, index: int) -> PoolSpec:
    where = f"pool {index}"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must be a table")
    raw = dict(raw)
    name = _take(raw, "name", str, where)
    where = f"pool {name!r}"
    groups = raw.pop("groups", None)
    preset = _take(raw, "preset", str, where, DEFAULT_PRESET)
    role = _take(raw, "role", str, where, "")
    if groups is None:
        group = _group(raw, where, preset, {})
        return PoolSpec(name, group.count, group.engine, pod_class=group.pod_class, role=role)
    if "count" in raw or "pod_class" in raw:
        raise ConfigError(f"{where}: 'count' / 'pod_class' go in each [[pools.groups]] of a mixed pool")
    if not isinstance(groups, list) or not groups:
        raise ConfigError(f"{where}: 'groups' must be a non-empty list of tables")
    base = check_file_overrides(raw, where)
    groups_ = tuple(_group(g, f"{where} group {i}", preset, base) for i, g in enumerate(groups))
    return dataclasses.replace(PoolSpec.mixed(name, groups_), role=role)


def load_cluster_file(path: Path) -> tuple[tuple[PoolSpec, ...], dict[str, Any]]:
    """Return the pools and the cluster keys of a TOML (``.toml``) or JSON file."""
    try:
        text = path.read_text()
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot parse {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: must be a table / object")
    raw_pools = data.pop("pools", None)
    if not isinstance(raw_pools, list) or not raw_pools:
        raise ConfigError(f"{path}: 'pools' must be a non-empty list")
    try:
        pools = [_pool(raw, i) for i, raw in enumerate(raw_pools)]
        check_unique(pools)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    extra: dict[str, Any] = {}
    for key, value in data.items():
        kind = CLUSTER_KEYS.get(key)
        if kind is None:
            raise ConfigError(f"{path}: unknown cluster key {key!r} (known: {', '.join(sorted(CLUSTER_KEYS))})")
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise ConfigError(f"{path}: {key!r} must be {kind.__name__}, got {value!r}")
        extra[key] = value
    return tuple(pools), extra
