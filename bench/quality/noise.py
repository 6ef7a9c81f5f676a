"""Noise processes with conditional quantiles known in closed form (or solved numerically).

* lognormal: ``y = m·exp(σZ)`` → ``q_a = m·exp(σ·Φ⁻¹(a))``;
* shifted Weibull (skewed, additive in ms): ``y = m + s·(W − w₅₀)``, ``W ~ Weibull(k)`` →
  ``q_a = m + s·((−ln(1−a))^{1/k} − (ln 2)^{1/k})``, so ``m`` is the median;
* spike mixture: with probability ``p`` the lognormal latency is multiplied by a spike factor
  ``S``, ``ln S ~ U[ln 5, ln 20]`` (a preempted and recomputed request). The CDF of
  ``ln y − ln m = σZ + U`` is closed form; the quantile is solved by bisection per row.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from statistics import NormalDist

import numpy as np
from scipy.special import ndtr

_NORMAL = NormalDist()
SPIKE_LOW, SPIKE_HIGH = 5.0, 20.0


def z(alpha: float) -> float:
    return _NORMAL.inv_cdf(alpha)


def lognormal(median: np.ndarray, sigma: np.ndarray | float, rng: np.random.Generator) -> np.ndarray:
    return median * np.exp(sigma * rng.standard_normal(len(median)))


def lognormal_quantiles(median: np.ndarray, sigma: np.ndarray | float,
                        levels: tuple[float, ...]) -> dict[float, np.ndarray]:
    return {a: median * np.exp(sigma * z(a)) for a in levels}


WEIBULL_K = 1.5


def _weibull_q(alpha: float, k: float = WEIBULL_K) -> float:
    return (-math.log1p(-alpha)) ** (1.0 / k)


def weibull(median: np.ndarray, spread: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    w = rng.weibull(WEIBULL_K, len(median))
    return median + spread * (w - _weibull_q(0.5))


def weibull_quantiles(median: np.ndarray, spread: np.ndarray, levels: tuple[float, ...]) -> dict[float, np.ndarray]:
    return {a: median + spread * (_weibull_q(a) - _weibull_q(0.5)) for a in levels}


def spiked(median: np.ndarray, sigma: float, p_spike: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    n = len(median)
    spike = rng.random(n) < p_spike
    log_s = rng.uniform(math.log(SPIKE_LOW), math.log(SPIKE_HIGH), n)
    return median * np.exp(sigma * rng.standard_normal(n) + np.where(spike, log_s, 0.0))


def _phi(x: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _big_phi(x: np.ndarray) -> np.ndarray:
    return np.asarray(ndtr(x), dtype=np.float64)


def _spiked_cdf(t: np.ndarray, sigma: float, p: np.ndarray) -> np.ndarray:
    """P(σZ + U·B ≤ t) with B ~ Bernoulli(p), U ~ U[a, b] (a = ln 5, b = ln 20)."""
    a, b = math.log(SPIKE_LOW), math.log(SPIKE_HIGH)

    def g(x: np.ndarray) -> np.ndarray:
        return x * _big_phi(x) + _phi(x)

    base = _big_phi(t / sigma)
    spike = sigma / (b - a) * (g((t - a) / sigma) - g((t - b) / sigma))
    return (1 - p) * base + p * spike


def spiked_quantiles(median: np.ndarray, sigma: float, p_spike: np.ndarray,
                     levels: tuple[float, ...]) -> Mapping[float, np.ndarray]:
    """Per-row quantiles of the spike mixture by bisection on ``ln y − ln m`` (60 halvings)."""
    out = {}
    for alpha in levels:
        lo = np.full(len(median), -8.0 * sigma)
        hi = np.full(len(median), 8.0 * sigma + math.log(SPIKE_HIGH))
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            below = _spiked_cdf(mid, sigma, p_spike) < alpha
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        out[alpha] = median * np.exp(0.5 * (lo + hi))
    return out
