"""Family (d) heavy tails: lognormal latency with rare 5–20× spikes, as preemptions cause.

The spike probability rises with KV pressure (a preempted request is recomputed from scratch)
and, for TTFT, with a long queue: 0.3 % on a cool pod, about 9 % at full KV. The median is
additive (like family (a) but on the load-correlated features). Quantiles of the mixture are
solved numerically per row (``noise.spiked_quantiles``).
"""

from __future__ import annotations

import numpy as np

from bench.quality.family import QUANTILES, AnalyticFamily, Split
from bench.quality.loadfeatures import effective_tokens, load_features
from bench.quality.noise import spiked, spiked_quantiles

TTFT_SIGMA, TPOT_SIGMA = 0.2, 0.1


def p_spike(c: dict[str, np.ndarray], target: str) -> np.ndarray:
    pressure = np.clip((c["kv_cache_percentage"] - 0.65) / 0.35, 0, 1) ** 2
    p = 0.003 + 0.09 * pressure
    if target == "ttft":
        p = p + 0.01 * (c["num_request_waiting"] > 5)
    return p


def median(c: dict[str, np.ndarray], target: str) -> np.ndarray:
    if target == "ttft":
        return (18 + 0.055 * effective_tokens(c) + 0.03 * c["prefill_tokens_in_flight"]
                + 35 * c["num_request_waiting"] + 0.7 * c["num_request_running"])
    return 5.5 + 0.2 * c["num_request_running"] + 8 * c["kv_cache_percentage"] ** 2 + 0.001 * c[
        "decode_tokens_in_flight"]


class HeavyTail(AnalyticFamily):
    name = "heavytail"

    def draw(self, target: str, n: int, rng: np.random.Generator) -> Split:
        cols = load_features(n, rng)
        m, p = median(cols, target), p_spike(cols, target)
        sigma = TTFT_SIGMA if target == "ttft" else TPOT_SIGMA
        return Split(cols, spiked(m, sigma, p, rng), spiked_quantiles(m, sigma, p, QUANTILES))
