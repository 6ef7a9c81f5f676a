"""A synthetic latency process with an analytically known p90 (trainer-independent).

Features are drawn like an llm-d router would see them; each latency is a deterministic
median (a roofline-style function of the features) times lognormal noise:

    y = median(x) · exp(σ·Z),  Z ~ N(0, 1)   ⇒   p_q(x) = median(x) · exp(σ·Φ⁻¹(q))

so the true conditional quantile is known exactly. Rows follow the EPP's two kinds
(contract §2.2): TTFT rows (``actual_tpot_ms = 0``) and TPOT rows (``actual_ttft_ms = 0``,
``prefix_cache_score = 0``). Used by benchmarks, the demo and tests to feed a trainer.
"""

from __future__ import annotations

from statistics import NormalDist
from typing import Any

import numpy as np

from shared.features import feature_columns

TTFT_SIGMA = 0.25
TPOT_SIGMA = 0.15
RAW = ("kv_cache_percentage", "input_token_length", "num_request_waiting", "num_request_running",
       "num_tokens_generated", "prefix_cache_score", "prefill_tokens_in_flight", "decode_tokens_in_flight",
       "encoder_input_size", "encoder_matched_size")


def features(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Raw request columns (float64), plausible ranges for a busy 8B-model pool; fields not drawn here
    (pod_type, pod_class) keep their defaults."""
    waiting = np.where(rng.random(n) < 0.6, 0, rng.geometric(0.25, n)).astype(np.float64)
    running = rng.integers(1, 64, n).astype(np.float64)
    return feature_columns({
        "kv_cache_percentage": np.clip(running / 64 + rng.normal(0, 0.1, n), 0, 1),
        "input_token_length": np.round(rng.lognormal(6.5, 1.0, n)).clip(1, 32_000),
        "num_request_waiting": waiting,
        "num_request_running": running,
        "num_tokens_generated": np.zeros(n),
        "prefix_cache_score": np.where(rng.random(n) < 0.5, 0.0, rng.uniform(0, 1, n)),
        "prefill_tokens_in_flight": np.round(rng.exponential(2000, n)),
        "decode_tokens_in_flight": np.zeros(n),
        "encoder_input_size": np.zeros(n),
        "encoder_matched_size": np.zeros(n),
    }, n)


def ttft_median(c: dict[str, np.ndarray]) -> np.ndarray:
    effective = (1 - c["prefix_cache_score"]) * c["input_token_length"]
    return (20 + 0.06 * effective + 0.03 * c["prefill_tokens_in_flight"] + 45 * c["num_request_waiting"]
            + 0.8 * c["num_request_running"])


def tpot_median(c: dict[str, np.ndarray]) -> np.ndarray:
    return 6 + 0.25 * c["num_request_running"] + 10 * c["kv_cache_percentage"] ** 2 + 0.5 * (
        c["num_request_waiting"] > 0)


def true_quantile(kind: str, cols: dict[str, np.ndarray], q: float = 0.9) -> np.ndarray:
    sigma = TTFT_SIGMA if kind == "ttft" else TPOT_SIGMA
    median = ttft_median(cols) if kind == "ttft" else tpot_median(cols)
    return median * float(np.exp(sigma * NormalDist().inv_cdf(q)))


def draw(kind: str, n: int, rng: np.random.Generator) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """n rows of one EPP kind: (feature columns, observed latency)."""
    cols = features(n, rng)
    if kind == "tpot":
        cols["prefix_cache_score"] = np.zeros(n)
        y = tpot_median(cols) * np.exp(TPOT_SIGMA * rng.standard_normal(n))
    else:
        y = ttft_median(cols) * np.exp(TTFT_SIGMA * rng.standard_normal(n))
    return cols, y


def rows(kind: str, n: int, rng: np.random.Generator) -> list[dict[str, Any]]:
    """n wire rows (``TrainingEntry`` dicts) of one kind."""
    cols, y = draw(kind, n, rng)
    ints = set(RAW) - {"kv_cache_percentage", "prefix_cache_score"}
    out: list[dict[str, Any]] = []
    columns = {k: (cols[k].astype(np.int64).tolist() if k in ints else cols[k].tolist()) for k in RAW}
    targets = y.tolist()
    for i in range(n):
        row = {k: columns[k][i] for k in RAW}
        row["actual_ttft_ms"] = targets[i] if kind == "ttft" else 0.0
        row["actual_tpot_ms"] = targets[i] if kind == "tpot" else 0.0
        out.append(row)
    return out


def mixed_rows(n: int, rng: np.random.Generator) -> list[dict[str, Any]]:
    """n rows, half TTFT rows and half TPOT rows, interleaved."""
    half = n // 2
    a, b = rows("ttft", n - half, rng), rows("tpot", half, rng)
    out = [r for pair in zip(a, b, strict=False) for r in pair]
    return out + a[len(b):]
