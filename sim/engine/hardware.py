"""Model shapes, GPUs and step-time profiles: the physical constants behind every preset.

Sources (see ``sim/README.md``, "Presets and formulas"):

- model shapes: the models' Hugging Face ``config.json`` (as restated in ``shared/data/README.md``);
  weight bytes are derived from the shape (bf16 parameters x 2 bytes);
- GPUs: NVIDIA datasheets (A100 80GB SXM: 2,039 GB/s HBM2e, 312 TFLOPS dense BF16; H100 SXM:
  3.35 TB/s HBM3, 989 TFLOPS dense BF16), 80 GiB of device memory each (nvidia-smi: 81,920 MiB);
- linear-layer and all-reduce times: the vidur profiles in ``shared/data/profiles``.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3


@dataclass(frozen=True)
class ModelSpec:
    """Decoder-only transformer shape (Llama family: gated MLP, GQA, untied embeddings)."""

    name: str
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    mlp_dim: int
    vocab: int
    dtype_bytes: int = 2

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of every layer, all KV heads (summed over tensor-parallel ranks)."""
        return self.n_layers * self.n_kv_heads * self.head_dim * 2 * self.dtype_bytes

    @property
    def linear_params_per_layer(self) -> int:
        """Weights of one layer's matmuls: QKV + output projection + gate/up/down of the MLP.

        Each weight does one multiply-add per token, so linear FLOPs per token = 2 x this.
        """
        q = self.n_heads * self.head_dim
        kv = 2 * self.n_kv_heads * self.head_dim
        return self.hidden * (q + kv) + q * self.hidden + 3 * self.hidden * self.mlp_dim

    @property
    def weight_bytes(self) -> float:
        """All parameters: layers (+ two RMSNorm vectors each), embedding, LM head, final norm."""
        per_layer = self.linear_params_per_layer + 2 * self.hidden
        params = self.n_layers * per_layer + 2 * self.vocab * self.hidden + self.hidden
        return float(params * self.dtype_bytes)


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
    all_reduce_file: str | None = None
    """Measured all-reduce times for tensor parallelism (None: TP > 1 is not available)."""


@dataclass(frozen=True)
class ProfileSpec:
    """A vidur linear-layer profile and the model it was measured on.

    When the served model differs from ``measured`` (same GPU, sibling architecture), the per-layer
    times are scaled by ``served.linear_params_per_layer / measured.linear_params_per_layer``, the
    ratio of linear FLOPs per token.
    """

    file: str
    measured: ModelSpec

    def scale_for(self, served: ModelSpec) -> float:
        return served.linear_params_per_layer / self.measured.linear_params_per_layer


LLAMA3_8B = ModelSpec("meta-llama/Meta-Llama-3-8B-Instruct", n_layers=32, hidden=4096, n_heads=32,
                      n_kv_heads=8, head_dim=128, mlp_dim=14336, vocab=128256)
LLAMA2_7B = ModelSpec("meta-llama/Llama-2-7b-chat-hf", n_layers=32, hidden=4096, n_heads=32,
                      n_kv_heads=32, head_dim=128, mlp_dim=11008, vocab=32000)
LLAMA3_70B = ModelSpec("meta-llama/Meta-Llama-3-70B-Instruct", n_layers=80, hidden=8192, n_heads=64,
                       n_kv_heads=8, head_dim=128, mlp_dim=28672, vocab=128256)

A100_80G = GpuSpec("A100-80G", 80 * GIB, 2.039e12, 312e12, step_overhead_ms=2.5,
                   all_reduce_file="a100_dgx_all_reduce.csv")
H100_80G = GpuSpec("H100-80G", 80 * GIB, 3.35e12, 989e12, step_overhead_ms=1.8)

A100_LLAMA3_8B = ProfileSpec("a100_llama-3-8b_mlp.csv", LLAMA3_8B)
H100_LLAMA2_7B = ProfileSpec("h100_llama-2-7b_mlp.csv", LLAMA2_7B)
A100_LLAMA3_70B = ProfileSpec("a100_llama-3-70b_mlp.csv", LLAMA3_70B)
