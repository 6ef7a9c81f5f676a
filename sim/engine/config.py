"""Engine configuration: model shape, GPU, vLLM scheduler knobs, and named presets."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from sim.engine.errors import ConfigError

GIB = 1024**3


@dataclass(frozen=True)
class ModelSpec:
    """Transformer shape; enough to size the KV cache and the attention cost."""

    name: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    weight_bytes: float
    profile_file: str
    """CSV in ``shared/data/profiles`` with per-layer linear-op times (vidur format)."""
    dtype_bytes: int = 2

    @property
    def kv_bytes_per_token(self) -> int:
        return self.n_layers * self.n_kv_heads * self.head_dim * 2 * self.dtype_bytes


@dataclass(frozen=True)
class GpuSpec:
    """Accelerator figures used by the first-principles attention model."""

    name: str
    memory_bytes: float
    hbm_bytes_per_s: float
    peak_flops: float
    attn_flops_efficiency: float = 0.45
    attn_bw_efficiency: float = 0.7
    step_overhead_ms: float = 2.0
    """Fixed CPU / scheduler / sampling cost of every engine step."""
    per_seq_overhead_ms: float = 0.012
    """Extra CPU cost per sequence in the batch (input prep, detokenisation)."""


LLAMA3_8B = ModelSpec(
    "meta-llama/Meta-Llama-3-8B-Instruct", 32, 32, 8, 128, 16.06e9, "a100_llama-3-8b_mlp.csv"
)
LLAMA2_7B = ModelSpec("meta-llama/Llama-2-7b-chat-hf", 32, 32, 32, 128, 13.5e9, "h100_llama-2-7b_mlp.csv")
A100_80G = GpuSpec("A100-80G", 80 * GIB, 2.039e12, 312e12, step_overhead_ms=2.5)
H100_80G = GpuSpec("H100-80G", 80 * GIB, 3.35e12, 989e12, step_overhead_ms=1.8)


@dataclass(frozen=True)
class EngineConfig:
    """Everything one simulated vLLM pod needs. Build with :meth:`from_preset`."""

    preset: str = "llama3-8b-a100"
    model: ModelSpec = LLAMA3_8B
    gpu: GpuSpec = A100_80G
    max_model_len: int = 8192
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    activation_reserve_bytes: float = 2.0 * GIB
    num_gpu_blocks_override: int | None = None
    enable_prefix_caching: bool = True
    noise_std: float = 0.03
    """Relative standard deviation of the multiplicative step-time noise."""
    seed: int = 0
    served_model_name: str = ""

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model.name

    @property
    def num_gpu_blocks(self) -> int:
        if self.num_gpu_blocks_override is not None:
            return self.num_gpu_blocks_override
        budget = self.gpu.memory_bytes * self.gpu_memory_utilization
        kv_bytes = budget - self.model.weight_bytes - self.activation_reserve_bytes
        blocks = int(kv_bytes // (self.model.kv_bytes_per_token * self.block_size))
        if blocks <= 0:
            raise ConfigError(
                f"no memory left for the KV cache (gpu_memory_utilization={self.gpu_memory_utilization})"
            )
        return blocks

    def validate(self) -> EngineConfig:
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ConfigError("max_num_batched_tokens must be >= max_num_seqs")
        if self.max_model_len < 2 or self.block_size < 1 or self.max_num_seqs < 1:
            raise ConfigError("max_model_len, block_size and max_num_seqs must be positive")
        kv_tokens = self.num_gpu_blocks * self.block_size
        if kv_tokens < self.max_model_len:
            raise ConfigError(
                f"KV cache holds {kv_tokens} tokens, fewer than max_model_len={self.max_model_len}"
            )
        return self

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


PRESETS: dict[str, EngineConfig] = {
    "llama3-8b-a100": EngineConfig(preset="llama3-8b-a100", model=LLAMA3_8B, gpu=A100_80G),
    "llama2-7b-h100": EngineConfig(
        preset="llama2-7b-h100", model=LLAMA2_7B, gpu=H100_80G, max_model_len=4096
    ),
}
