"""One change to a pod's condition (the action part of a scenario event or an admin request).

Keys (all optional, at least one):

| key | value | effect |
| --- | --- | --- |
| ``speed_factor`` | number > 0 | every later step lasts ``factor`` x its nominal time (1.0 = normal) |
| ``fail`` | ``true`` | the pod crashes: its queued and running requests are aborted, its KV cache is lost |
| ``restore`` | ``true`` | a failed pod is back (empty cache) |
| ``flush_prefix_cache`` | ``true`` | every cached prefix is forgotten |
| ``kv_blocks`` | int >= 1 | KV capacity in blocks (at most the configured size, at least one ``max_model_len``) |
| ``kv_fraction`` | 0 < x <= 1 | KV capacity as a fraction of the configured size |
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from sim.engine.config import EngineConfig
from sim.engine.errors import ConfigError

CHANGE_KEYS = ("speed_factor", "fail", "restore", "flush_prefix_cache", "kv_blocks", "kv_fraction")
FLAG_KEYS = ("fail", "restore", "flush_prefix_cache")
EXCLUSIVE = (("fail", "restore"), ("kv_blocks", "kv_fraction"))


@dataclass(frozen=True)
class PodChange:
    speed_factor: float | None = None
    fail: bool = False
    restore: bool = False
    flush_prefix_cache: bool = False
    kv_blocks: int | None = None
    kv_fraction: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """Only the keys that are set, as they would be written in a scenario file."""
        return {k: v for k, v in asdict(self).items() if v not in (None, False)}

    def kv_target(self, cfg: EngineConfig) -> int | None:
        """KV capacity in blocks this change asks for on a pod configured as ``cfg`` (None: unchanged)."""
        if self.kv_blocks is not None:
            return self.kv_blocks
        if self.kv_fraction is not None:
            return max(1, round(self.kv_fraction * cfg.num_gpu_blocks))
        return None

    def check(self, cfg: EngineConfig, where: str) -> None:
        """Raise :class:`ConfigError` if the change cannot apply to a pod configured as ``cfg``."""
        blocks = self.kv_target(cfg)
        if blocks is None:
            return
        key = "kv_blocks" if self.kv_blocks is not None else "kv_fraction"
        need = -(-cfg.max_model_len // cfg.block_size)
        if blocks < need:
            raise ConfigError(f"{where}: '{key}' leaves {blocks} KV blocks, fewer than one max_model_len "
                              f"sequence needs ({cfg.max_model_len} tokens = {need} blocks)")
        if blocks > cfg.num_gpu_blocks:
            raise ConfigError(f"{where}: '{key}' asks for {blocks} KV blocks, more than the "
                              f"{cfg.num_gpu_blocks} the pod has")


def _number(raw: Mapping[str, Any], key: str, where: str) -> float:
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{where}: '{key}' must be a finite number, got {value!r}")
    return float(value)


def parse_change(raw: Mapping[str, Any], where: str, extra_keys: frozenset[str] = frozenset()) -> PodChange:
    """Validate the change keys of ``raw`` (keys in ``extra_keys`` are the caller's and skipped)."""
    unknown = sorted(set(raw) - set(CHANGE_KEYS) - extra_keys)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(CHANGE_KEYS))})")
    for key in FLAG_KEYS:
        if key in raw and raw[key] is not True:
            raise ConfigError(f"{where}: '{key}' must be true, got {raw[key]!r}")
    for a, b in EXCLUSIVE:
        if a in raw and b in raw:
            raise ConfigError(f"{where}: '{a}' and '{b}' cannot be combined in one event")
    speed = kv_fraction = None
    kv_blocks = None
    if "speed_factor" in raw:
        speed = _number(raw, "speed_factor", where)
        if speed <= 0:
            raise ConfigError(f"{where}: 'speed_factor' must be > 0, got {raw['speed_factor']!r}")
    if "kv_fraction" in raw:
        kv_fraction = _number(raw, "kv_fraction", where)
        if not 0.0 < kv_fraction <= 1.0:
            raise ConfigError(f"{where}: 'kv_fraction' must be in (0, 1], got {raw['kv_fraction']!r}")
    if "kv_blocks" in raw:
        value = raw["kv_blocks"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{where}: 'kv_blocks' must be an integer >= 1, got {value!r}")
        kv_blocks = value
    change = PodChange(speed, "fail" in raw, "restore" in raw, "flush_prefix_cache" in raw, kv_blocks,
                       kv_fraction)
    if not change.as_dict():
        raise ConfigError(f"{where}: no change given (one of {', '.join(CHANGE_KEYS)})")
    return change
