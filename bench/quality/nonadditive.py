"""Family (b) non-additive: products and powers of load and size features, lognormal noise.

TTFT: prefill cost grows super-linearly with the uncached prompt (attention), is slowed by the
batch it shares the GPU with, and waits behind the prefill tokens and requests already queued —
a queue that drains slower when the pod is busy. TPOT: the decode step grows as a power of the
batch, amplified by KV pressure, plus the KV read of the tokens in flight and chunked-prefill
interference.
"""

from __future__ import annotations

import numpy as np

from bench.quality.family import QUANTILES, AnalyticFamily, Split
from bench.quality.loadfeatures import effective_tokens, load_features
from bench.quality.noise import lognormal, lognormal_quantiles

TTFT_SIGMA, TPOT_SIGMA = 0.22, 0.12


def ttft_median(c: dict[str, np.ndarray]) -> np.ndarray:
    eff = effective_tokens(c)
    compute = 0.045 * eff * (1 + eff / 12_000)
    batch = (1 + c["num_request_running"] / 40) ** 0.7 * (1 + 0.8 * c["kv_cache_percentage"] ** 3)
    queue = (0.04 * c["prefill_tokens_in_flight"] + 30 * c["num_request_waiting"]) * (
        1 + c["num_request_running"] / 80)
    return (12 + compute) * batch + queue


def tpot_median(c: dict[str, np.ndarray]) -> np.ndarray:
    kv = c["kv_cache_percentage"]
    return (4.5 * (1 + c["num_request_running"] / 24) ** 1.25 * (1 + 0.9 * kv**2)
            + 0.0015 * c["decode_tokens_in_flight"] * (0.5 + kv)
            + 3 * np.sqrt(c["prefill_tokens_in_flight"] / 1000))


class NonAdditive(AnalyticFamily):
    name = "nonadditive"

    def draw(self, target: str, n: int, rng: np.random.Generator) -> Split:
        cols = load_features(n, rng)
        median, sigma = (ttft_median(cols), TTFT_SIGMA) if target == "ttft" else (tpot_median(cols), TPOT_SIGMA)
        return Split(cols, lognormal(median, sigma, rng), lognormal_quantiles(median, sigma, QUANTILES))
