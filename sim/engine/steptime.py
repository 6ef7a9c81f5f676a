"""Step-time model: profiled linear layers + all-reduce + first-principles attention + CPU overhead + noise.

``t = overhead + per_seq * seqs + linear[tokens] + comm[tokens] + c_pf * sum(q * (ctx + q/2)) + c_dec * sum(kv)
+ c_uniq * unique_kv`` (``c_uniq`` only in measured profiles: distinct cached tokens read, see
:mod:`sim.engine.stepfit`)

- ``linear``: :func:`sim.engine.profile.linear_table` for the tensor-parallel degree (one shard);
- ``comm``: two all-reduces per layer of ``tokens x hidden x 2`` bytes (0 without TP);
- prefill attention FLOPs per layer and GPU: ``4 * (n_heads / TP) * head_dim * q * kv_avg`` (QK^T and
  PV, causal), at ``peak_flops * attn_flops_efficiency``;
- decode attention reads every cached token's K and V once per step, each GPU its ``1 / TP`` share of
  the KV heads: ``kv_len * kv_bytes_per_token / TP`` at ``hbm_bytes_per_s * attn_bw_efficiency``.

A config built from a measured profile (``cfg.measured``, :mod:`sim.engine.stepfit`) takes every
coefficient and the token table (linear layers, nothing for all-reduce) from the engine it was measured on.

``speed_factor`` (scenarios: a throttled GPU, a noisy neighbour) multiplies every step's duration,
including fast-forwarded decode runs; :meth:`StepTimeModel.base_ms` stays the nominal time.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from sim.engine.config import EngineConfig
from sim.engine.errors import ConfigError
from sim.engine.profile import all_reduce_table, linear_table
from sim.paths import profile_path


@dataclass(frozen=True)
class StepCoefficients:
    overhead_ms: float
    per_seq_ms: float
    prefill_ms_per_qk: float
    """ms per unit of ``q * kv`` (all layers)."""
    decode_ms_per_kv_token: float
    """ms per cached token read in a decode step (all layers)."""
    decode_ms_per_unique_kv_token: float = 0.0
    """ms per distinct cached token a step's decodes read (measured profiles; 0 for the GPU model)."""


def coefficients(cfg: EngineConfig) -> StepCoefficients:
    if cfg.measured is not None:
        f = cfg.measured
        return StepCoefficients(f.overhead_ms, f.per_seq_ms, f.prefill_ms_per_qk, f.decode_ms_per_kv_token,
                                f.decode_ms_per_unique_kv_token)
    m, g, tp = cfg.model, cfg.gpu, cfg.tensor_parallel_size
    flops_per_qk = 4.0 * m.n_layers * (m.n_heads / tp) * m.head_dim
    prefill = flops_per_qk / (g.peak_flops * g.attn_flops_efficiency) * 1e3
    decode = m.kv_bytes_per_token / tp / (g.hbm_bytes_per_s * g.attn_bw_efficiency) * 1e3
    return StepCoefficients(g.step_overhead_ms, g.per_seq_overhead_ms, prefill, decode)


def linear_ms_table(cfg: EngineConfig, max_tokens: int) -> tuple[float, ...]:
    """Profiled linear-layer milliseconds for 0..max_tokens batch tokens on one TP shard."""
    if cfg.measured is not None:
        return cfg.measured.token_ms_table(max_tokens)
    scale = cfg.profile.scale_for(cfg.model)
    return linear_table(profile_path(cfg.profile.file), cfg.model.n_layers, max_tokens, cfg.tensor_parallel_size,
                        scale)


def comm_ms_table(cfg: EngineConfig, max_tokens: int) -> tuple[float, ...]:
    """All-reduce milliseconds per step for 0..max_tokens batch tokens (zeros without TP)."""
    tp = cfg.tensor_parallel_size
    if tp == 1 or cfg.measured is not None:
        return (0.0,) * (max_tokens + 1)
    if cfg.gpu.all_reduce_file is None:
        raise ConfigError(f"no all-reduce profile for {cfg.gpu.name}: tensor_parallel_size must be 1")
    m = cfg.model
    return all_reduce_table(profile_path(cfg.gpu.all_reduce_file), tp, m.n_layers, m.hidden * m.dtype_bytes,
                            max_tokens)


class StepTimeModel:
    """Deterministic (seeded) step durations in seconds."""

    def __init__(self, cfg: EngineConfig, seed: int | None = None) -> None:
        self.coef = coefficients(cfg)
        max_tokens = max(cfg.max_num_batched_tokens, 1)
        self.linear_ms = linear_ms_table(cfg, max_tokens)
        self.comm_ms = comm_ms_table(cfg, max_tokens)
        self.token_ms = tuple(a + b for a, b in zip(self.linear_ms, self.comm_ms, strict=True))
        """Linear layers + all-reduce: the part of a step that depends only on batch tokens."""
        self.noise_std = cfg.noise_std
        self.speed_factor = 1.0
        """Step-time multiplier (1.0 = nominal, 2.0 = every step twice as long)."""
        self._rng = random.Random(cfg.seed if seed is None else seed)

    @property
    def reads_unique_kv(self) -> bool:
        """Whether step times depend on the distinct cached tokens read (worth counting them)."""
        return self.coef.decode_ms_per_unique_kv_token > 0.0

    def base_ms(self, num_tokens: int, num_seqs: int, prefill_qk: float, decode_kv: int,
                unique_kv: int | None = None) -> float:
        """Nominal step ms; ``unique_kv`` = distinct cached tokens among ``decode_kv`` (None: all distinct)."""
        c = self.coef
        return (
            c.overhead_ms
            + c.per_seq_ms * num_seqs
            + self.token_ms[num_tokens]
            + c.prefill_ms_per_qk * prefill_qk
            + c.decode_ms_per_kv_token * decode_kv
            + c.decode_ms_per_unique_kv_token * (decode_kv if unique_kv is None else unique_kv)
        )

    def noise(self, steps: int = 1) -> float:
        """Multiplicative noise factor for ``steps`` consecutive steps (averaging shrinks it)."""
        if self.noise_std <= 0.0:
            return 1.0
        sigma = self.noise_std / math.sqrt(steps)
        return max(0.5, 1.0 + sigma * self._rng.gauss(0.0, 1.0))

    def step_seconds(self, num_tokens: int, num_seqs: int, prefill_qk: float, decode_kv: int,
                     unique_kv: int | None = None) -> float:
        base = self.base_ms(num_tokens, num_seqs, prefill_qk, decode_kv, unique_kv)
        return base * self.speed_factor * self.noise() / 1e3

    def decode_run(self, batch: int, kv_sum: int, unique_kv: int | None = None) -> tuple[float, float]:
        """``(a, b)`` in ms so that decode step ``j`` of an unchanged batch lasts ``a + b * j`` (each step adds
        one distinct token per sequence)."""
        c = self.coef
        per_kv = c.decode_ms_per_kv_token
        unique = kv_sum if unique_kv is None else unique_kv
        a = (c.overhead_ms + c.per_seq_ms * batch + self.token_ms[batch] + per_kv * kv_sum
             + c.decode_ms_per_unique_kv_token * unique)
        f = self.speed_factor
        return a * f, (per_kv + c.decode_ms_per_unique_kv_token) * batch * f
