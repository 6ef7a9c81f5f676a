"""Family (f) moving threshold: a smooth knee whose position moves with another feature.

No tree model's assumptions: the knee is diagonal in feature space. TTFT: past a prompt size
that shrinks as the KV cache fills (the prefill no longer fits in one chunk with free blocks),
the cost per uncached token quadruples (softplus knee, width 300 tokens). TPOT: the step time
jumps smoothly once the batch exceeds a size that falls with KV usage (memory-bound regime).
"""

from __future__ import annotations

import numpy as np

from bench.quality.family import QUANTILES, AnalyticFamily, Split
from bench.quality.loadfeatures import effective_tokens, load_features
from bench.quality.noise import lognormal, lognormal_quantiles

TTFT_SIGMA, TPOT_SIGMA = 0.2, 0.12
KNEE_WIDTH = 300.0


def ttft_median(c: dict[str, np.ndarray]) -> np.ndarray:
    eff = effective_tokens(c)
    knee = 256 + 6000 * (1 - c["kv_cache_percentage"]) ** 2
    return 20 + 0.04 * eff + 0.12 * KNEE_WIDTH * np.logaddexp(0, (eff - knee) / KNEE_WIDTH) + 25 * c[
        "num_request_waiting"]


def tpot_median(c: dict[str, np.ndarray]) -> np.ndarray:
    running = c["num_request_running"]
    knee = 16 + 64 * (1 - c["kv_cache_percentage"])
    return 6 + 0.1 * running + 20 / (1 + np.exp(-(running - knee) / 4))


class Threshold(AnalyticFamily):
    name = "threshold"

    def draw(self, target: str, n: int, rng: np.random.Generator) -> Split:
        cols = load_features(n, rng)
        median, sigma = (ttft_median(cols), TTFT_SIGMA) if target == "ttft" else (tpot_median(cols), TPOT_SIGMA)
        return Split(cols, lognormal(median, sigma, rng), lognormal_quantiles(median, sigma, QUANTILES))
