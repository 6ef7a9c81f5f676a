"""Family (c) heteroscedastic: skewed additive noise whose spread grows with load.

``y = m(x) + s(x)·(W − median W)``, ``W ~ Weibull(1.5)``: the noise is in milliseconds, not a
ratio, and its scale ``s`` goes from 6 % of the median on an idle pod to more than half of it on
a saturated one (TTFT: KV usage and queue; TPOT: KV usage squared and queue). The median has a
mild product of prompt cost and batch size.
"""

from __future__ import annotations

import numpy as np

from bench.quality.family import QUANTILES, AnalyticFamily, Split
from bench.quality.loadfeatures import effective_tokens, load_features
from bench.quality.noise import weibull, weibull_quantiles


def ttft_median_spread(c: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    waiting = c["num_request_waiting"]
    median = ((15 + 0.05 * effective_tokens(c)) * (1 + c["num_request_running"] / 100)
              + 0.035 * c["prefill_tokens_in_flight"] + 40 * waiting)
    load = np.clip(0.5 * c["kv_cache_percentage"] + 0.5 * np.minimum(waiting, 20) / 20, 0, 1)
    return median, median * (0.06 + 0.5 * load)


def tpot_median_spread(c: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    kv = c["kv_cache_percentage"]
    median = 5 + 0.22 * c["num_request_running"] + 9 * kv**2 + 0.0008 * c["decode_tokens_in_flight"]
    return median, median * (0.03 + 0.35 * kv**2 + 0.02 * np.minimum(c["num_request_waiting"], 10))


class Heteroscedastic(AnalyticFamily):
    name = "heteroscedastic"

    def draw(self, target: str, n: int, rng: np.random.Generator) -> Split:
        cols = load_features(n, rng)
        median, spread = ttft_median_spread(cols) if target == "ttft" else tpot_median_spread(cols)
        return Split(cols, weibull(median, spread, rng), weibull_quantiles(median, spread, QUANTILES))
