"""Engine configuration (model, GPU, profile, vLLM knobs, provisioning rule) and named presets.

KV capacity (``num_gpu_blocks``), per GPU of a tensor-parallel group, summed over the TP ranks::

    per_gpu = memory x gpu_memory_utilization - weights / TP - activation_reserve
    blocks  = floor(TP x per_gpu / (block_size x kv_bytes_per_token))

Provisioning rules (``provisioning``):

- ``aggressive``: ``max_num_seqs`` as configured (vLLM's default 256); when the KV cache runs out
  the newest running request is preempted and recomputed later;
- ``worst-case``: ``max_num_seqs`` capped to ``blocks // ceil(max_model_len / block_size)`` so every
  admitted request can grow to ``max_model_len`` at once: preemption cannot happen.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sim.engine.errors import ConfigError
from sim.engine.hardware import (
    A100_80G,
    A100_LLAMA3_8B,
    A100_LLAMA3_70B,
    GIB,
    H100_80G,
    H100_LLAMA2_7B,
    LLAMA2_7B,
    LLAMA3_8B,
    LLAMA3_70B,
    GpuSpec,
    ModelSpec,
    ProfileSpec,
)
from sim.engine.stepfit import StepFit

__all__ = ["GIB", "PRESETS", "PROVISIONING_RULES", "EngineConfig", "GpuSpec", "ModelSpec", "ProfileSpec"]

PROVISIONING_RULES = ("aggressive", "worst-case")


@dataclass(frozen=True)
class EngineConfig:
    """Everything one simulated vLLM pod needs. Build with :meth:`from_preset`."""

    preset: str = "llama3-8b-a100"
    model: ModelSpec = LLAMA3_8B
    gpu: GpuSpec = A100_80G
    profile: ProfileSpec = A100_LLAMA3_8B
    tensor_parallel_size: int = 1
    """GPUs per pod (one tensor-parallel group); the KV cache is the sum over them."""
    provisioning: str = "aggressive"
    """``aggressive`` (vLLM defaults, preemption possible) or ``worst-case`` (no preemption)."""
    max_model_len: int = 8192
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    activation_reserve_bytes: float = 2.0 * GIB
    """Per GPU: activations, sampler logits, NCCL / cuBLAS workspaces (vLLM measures this by profiling)."""
    num_gpu_blocks_override: int | None = None
    enable_prefix_caching: bool = True
    noise_std: float = 0.03
    """Relative standard deviation of the multiplicative step-time noise."""
    seed: int = 0
    served_model_name: str = ""
    measured: StepFit | None = None
    """Step times fitted to a real engine (:mod:`sim.engine.measured`); replaces ``gpu`` and ``profile``."""

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model.name

    @property
    def kv_bytes_per_gpu(self) -> float:
        tp = self.tensor_parallel_size
        budget = self.gpu.memory_bytes * self.gpu_memory_utilization
        return budget - self.model.weight_bytes / tp - self.activation_reserve_bytes

    @property
    def num_gpu_blocks(self) -> int:
        if self.num_gpu_blocks_override is not None:
            return self.num_gpu_blocks_override
        kv_bytes = self.kv_bytes_per_gpu * self.tensor_parallel_size
        blocks = int(kv_bytes // (self.model.kv_bytes_per_token * self.block_size))
        if blocks <= 0:
            raise ConfigError(
                f"no memory left for the KV cache (gpu_memory_utilization={self.gpu_memory_utilization}, "
                f"tensor_parallel_size={self.tensor_parallel_size})"
            )
        return blocks

    @property
    def kv_tokens(self) -> int:
        return self.num_gpu_blocks * self.block_size

    @property
    def worst_case_max_num_seqs(self) -> int:
        """Requests that fit in the KV cache all at ``max_model_len`` tokens."""
        return self.num_gpu_blocks // -(-self.max_model_len // self.block_size)

    def validate(self) -> EngineConfig:
        """Check the sizes and apply the provisioning rule; returns the config to use."""
        self._check_parallelism()
        if self.provisioning not in PROVISIONING_RULES:
            raise ConfigError(f"provisioning must be one of {PROVISIONING_RULES}, got {self.provisioning!r}")
        if self.max_model_len < 2 or self.block_size < 1 or self.max_num_seqs < 1:
            raise ConfigError("max_model_len, block_size and max_num_seqs must be positive")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ConfigError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.kv_tokens < self.max_model_len:
            raise ConfigError(
                f"KV cache holds {self.kv_tokens} tokens, fewer than max_model_len={self.max_model_len}"
            )
        cfg = self
        if self.provisioning == "worst-case" and self.max_num_seqs > self.worst_case_max_num_seqs:
            cfg = dataclasses.replace(self, max_num_seqs=self.worst_case_max_num_seqs)
        if cfg.max_num_batched_tokens < cfg.max_num_seqs:
            raise ConfigError("max_num_batched_tokens must be >= max_num_seqs")
        return cfg

    def _check_parallelism(self) -> None:
        tp = self.tensor_parallel_size
        if tp < 1 or self.model.n_heads % tp:
            raise ConfigError(f"tensor_parallel_size={tp} must divide the model's {self.model.n_heads} heads")
        if tp > 1 and self.gpu.all_reduce_file is None:
            raise ConfigError(f"tensor_parallel_size={tp}: no all-reduce profile for {self.gpu.name}")

    @classmethod
    def from_preset(cls, name: str = "llama3-8b-a100", **overrides: Any) -> EngineConfig:
        """Preset plus overrides; unknown keys (or ``None`` values, meaning "keep") are handled here."""
        try:
            base = PRESETS[name]
        except KeyError:
            raise ConfigError(f"unknown preset {name!r}; known: {', '.join(sorted(PRESETS))}") from None
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(overrides) - known
        if unknown:
            raise ConfigError(f"unknown engine config keys: {sorted(unknown)}")
        clean = {k: v for k, v in overrides.items() if v is not None}
        return dataclasses.replace(base, **clean).validate()


FILE_KEYS: dict[str, type] = {
    "tensor_parallel_size": int, "provisioning": str, "max_model_len": int, "max_num_seqs": int,
    "max_num_batched_tokens": int, "block_size": int, "gpu_memory_utilization": float,
    "activation_reserve_bytes": float, "num_gpu_blocks_override": int, "enable_prefix_caching": bool,
    "noise_std": float, "seed": int, "served_model_name": str,
}
"""Engine keys a cluster file may set, with the type their value must have."""


def check_file_overrides(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Validate engine keys read from a file (names and value types); errors name the key."""
    out: dict[str, Any] = {}
    for key, value in raw.items():
        want = FILE_KEYS.get(key)
        if want is None:
            raise ConfigError(f"{where}: unknown key {key!r} (engine keys: {', '.join(sorted(FILE_KEYS))})")
        ok = isinstance(value, want) and not (want is not bool and isinstance(value, bool))
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            ok, value = True, float(value)
        if not ok:
            raise ConfigError(f"{where}: {key!r} must be {want.__name__}, got {value!r}")
        out[key] = value
    return out


PRESETS: dict[str, EngineConfig] = {
    "llama3-8b-a100": EngineConfig(preset="llama3-8b-a100", model=LLAMA3_8B, gpu=A100_80G, profile=A100_LLAMA3_8B),
    "llama3-8b-h100": EngineConfig(preset="llama3-8b-h100", model=LLAMA3_8B, gpu=H100_80G, profile=H100_LLAMA2_7B),
    "llama2-7b-h100": EngineConfig(
        preset="llama2-7b-h100", model=LLAMA2_7B, gpu=H100_80G, profile=H100_LLAMA2_7B, max_model_len=4096
    ),
    "llama3-70b-a100-tp4": EngineConfig(
        preset="llama3-70b-a100-tp4", model=LLAMA3_70B, gpu=A100_80G, profile=A100_LLAMA3_70B,
        tensor_parallel_size=4, max_num_batched_tokens=2048, max_num_seqs=256,
    ),
}
