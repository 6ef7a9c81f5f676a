"""A measured engine profile (``python -m bench.fidelity.engine_profile``) and the simulator config built from it.

The profile file holds what the simulator needs and nothing from a GPU table: the engine's shape (block
size, KV blocks, ``max_num_seqs``, ``max_num_batched_tokens``, ``max_model_len``, the model), the raw
points measured on it (prefill TTFTs, decode TPOTs) and the :class:`StepFit` fitted to them. Without a
``fit`` section the points are fitted on load. :meth:`MeasuredProfile.engine_config` gives an
:class:`EngineConfig` whose step times come from the fit alone (see :mod:`sim.engine.steptime`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from sim.engine.config import EngineConfig
from sim.engine.errors import ConfigError
from sim.engine.hardware import GpuSpec, ModelSpec
from sim.engine.measured_fit import DecodePoint, PrefillPoint, fit_points
from sim.engine.stepfit import StepFit

FORMAT = "measured-engine-profile/1"
MEASURED_DEVICE = GpuSpec("measured", memory_bytes=0.0, hbm_bytes_per_s=1.0, peak_flops=1.0)
"""Placeholder device of measured configs: the profile's fit replaces every GPU constant."""


@dataclass(frozen=True)
class EngineShape:
    name: str
    block_size: int
    num_blocks: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    model: ModelSpec

    @property
    def kv_tokens(self) -> int:
        return self.block_size * self.num_blocks


@dataclass(frozen=True)
class MeasuredProfile:
    engine: EngineShape
    prefill: tuple[PrefillPoint, ...]
    decode: tuple[DecodePoint, ...]
    fit: StepFit
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Where and when it was measured (machine, versions, load average); not used by the simulator."""

    def engine_config(self, **overrides: Any) -> EngineConfig:
        """The simulator's config for this engine; ``overrides`` are EngineConfig fields (``None`` = keep)."""
        e = self.engine
        base = EngineConfig(
            preset=f"measured:{e.name}", model=e.model, gpu=MEASURED_DEVICE, max_model_len=e.max_model_len,
            max_num_seqs=e.max_num_seqs, max_num_batched_tokens=e.max_num_batched_tokens,
            block_size=e.block_size, num_gpu_blocks_override=e.num_blocks, noise_std=self.fit.noise_std,
            served_model_name=e.name, measured=self.fit,
        )
        known = {f.name for f in dataclasses.fields(EngineConfig)}
        unknown = set(overrides) - known
        if unknown:
            raise ConfigError(f"unknown engine config keys: {sorted(unknown)}")
        clean = {k: v for k, v in overrides.items() if v is not None}
        return dataclasses.replace(base, **clean).validate()

    def refit(self) -> MeasuredProfile:
        fit = fit_points(self.prefill, self.decode, self.engine.max_num_batched_tokens)
        return dataclasses.replace(self, fit=fit)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "engine": asdict(self.engine),
            "prefill": [asdict(p) for p in self.prefill],
            "decode": [asdict(d) for d in self.decode],
            "fit": self.fit.to_json(),
            "meta": dict(self.meta),
        }

    def write(self, path: Path) -> None:
        path.write_bytes(orjson.dumps(self.to_json(), option=orjson.OPT_INDENT_2))


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def profile_from_json(raw: Mapping[str, Any], where: str = "profile") -> MeasuredProfile:
    if raw.get("format") != FORMAT:
        raise ConfigError(f"{where}: not a measured engine profile (format {raw.get('format')!r}, want {FORMAT})")
    try:
        eng = dict(raw["engine"])
        shape = EngineShape(**{**eng, "model": ModelSpec(**eng["model"])})
        prefill = tuple(PrefillPoint(int(p["tokens"]), int(p["context"]), tuple(map(float, p["ttft_ms"])))
                        for p in raw["prefill"])
        decode = tuple(DecodePoint(int(d["batch"]), float(d["context"]), tuple(map(float, d["tpot_ms"])),
                                   float(d.get("step_cv", 0.0)), _optional_float(d.get("unique_kv")))
                       for d in raw["decode"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: bad profile: {exc!r}") from None
    if raw.get("fit") is None:
        fit = fit_points(prefill, decode, shape.max_num_batched_tokens)
    else:
        fit = StepFit.from_json(raw["fit"])
    return MeasuredProfile(shape, prefill, decode, fit, dict(raw.get("meta") or {}))


def load_profile(path: Path) -> MeasuredProfile:
    if not path.is_file():
        raise ConfigError(f"measured profile not found: {path}")
    try:
        raw = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not JSON: {exc}") from None
    return profile_from_json(raw, str(path))
