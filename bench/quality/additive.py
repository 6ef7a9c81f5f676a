"""Family (a) additive: today's ``bench/common/synthetic.py`` unchanged (additive median × lognormal noise)."""

from __future__ import annotations

import numpy as np

from bench.common import synthetic
from bench.quality.family import QUANTILES, AnalyticFamily, Split
from bench.quality.noise import lognormal_quantiles


class Additive(AnalyticFamily):
    name = "additive"

    def draw(self, target: str, n: int, rng: np.random.Generator) -> Split:
        cols, y = synthetic.draw(target, n, rng)
        cols = dict(cols, pod_type=np.zeros(n))
        median = synthetic.ttft_median(cols) if target == "ttft" else synthetic.tpot_median(cols)
        sigma = synthetic.TTFT_SIGMA if target == "ttft" else synthetic.TPOT_SIGMA
        return Split(cols, y, lognormal_quantiles(median, sigma, QUANTILES))
