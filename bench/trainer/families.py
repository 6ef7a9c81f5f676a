"""Synthetic latency families with a known p90, for the extrapolation benchmark (``bench.trainer.extrapolation``).

A latent load per row drives the work features of one target: TTFT rows carry queued prefill work ``L``
(``prefill_tokens_in_flight = L``, ``num_request_waiting ≈ L / mean prompt``), TPOT rows decode work ``D``
(``decode_tokens_in_flight = D``, ``num_request_running ≈ D / mean context``, KV use saturating toward 1 as D
grows). Every other feature varies on its own. Training rows draw the load uniformly below the target's cap;
test rows sit at ``k × cap`` (k = 1, 2, 4, 8, up to 10 % below). Each family is a median law of the features
times or plus a noise law whose p90 is closed-form, so every row carries its true p90.

The families are physics plus noise chosen without looking at the model: multiplicative log-normal noise,
additive noise in ms, a pool of two pod classes one 1.6× slower, a mildly superlinear queue, and a fixed
per-request overhead with a heavy-ish (Lomax) tail.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from statistics import NormalDist
from types import MappingProxyType
from typing import Any, Protocol

import numpy as np

from shared.features import TARGET_OF

Q = 0.9
Z90 = NormalDist().inv_cdf(Q)
MULTIPLES = (1, 2, 4, 8)
TEST_JITTER = 0.1
"""Test loads are ``k × cap × U(1 − jitter, 1)``: the 1× rows stay inside the training window."""
MEAN_PROMPT = 1000.0
MEAN_CONTEXT = 1000.0
KV_TOKENS = 300_000.0
"""KV use is ``1 − exp(−D / KV_TOKENS)``: 0.28 at the TPOT cap, 0.93 at 8× (admission control keeps it below 1)."""
FAST, SLOW = "gpu-fast", "gpu-slow"
INT_FIELDS = ("input_token_length", "num_request_waiting", "num_request_running", "num_tokens_generated",
              "prefill_tokens_in_flight", "decode_tokens_in_flight")

Columns = dict[str, np.ndarray]


class Noise(Protocol):
    """A noise law around a median: ``draw`` observations, ``p90`` in closed form."""

    def draw(self, median: np.ndarray, rng: np.random.Generator) -> np.ndarray: ...

    def p90(self, median: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class LogNormal:
    """``median · exp(σ Z)``."""

    sigma: float

    def draw(self, median: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return median * np.exp(self.sigma * rng.standard_normal(len(median)))

    def p90(self, median: np.ndarray) -> np.ndarray:
        return median * float(np.exp(self.sigma * Z90))


@dataclass(frozen=True)
class AdditiveExp:
    """``median + E``, E exponential with ``scale_ms``: noise that does not grow with the work."""

    scale_ms: float

    def draw(self, median: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return median + rng.exponential(self.scale_ms, len(median))

    def p90(self, median: np.ndarray) -> np.ndarray:
        return median + self.scale_ms * float(np.log(1.0 / (1.0 - Q)))


@dataclass(frozen=True)
class OverheadLomax:
    """``overhead + median · (1 + P)``, P Lomax(α, λ): a fixed per-request cost and a heavy-ish tail."""

    overhead_ms: float
    alpha: float = 3.0
    scale: float = 0.3

    def draw(self, median: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return self.overhead_ms + median * (1.0 + self.scale * rng.pareto(self.alpha, len(median)))

    def p90(self, median: np.ndarray) -> np.ndarray:
        factor = 1.0 + self.scale * ((1.0 - Q) ** (-1.0 / self.alpha) - 1.0)
        return self.overhead_ms + median * factor


@dataclass(frozen=True)
class Target:
    """One latency target: its cap on the work, the features a load makes, the median law (work term apart)."""

    name: str
    cap: float
    features: Callable[[np.ndarray, np.random.Generator], Columns]
    median: Callable[[Columns, np.ndarray], np.ndarray]
    """(columns, work term in load units) → median ms."""


def _prompts(n: int, rng: np.random.Generator) -> np.ndarray:
    return np.round(rng.lognormal(np.log(800.0), 0.8, n)).clip(16, 8192)


def ttft_features(load: np.ndarray, rng: np.random.Generator) -> Columns:
    n = len(load)
    return {"kv_cache_percentage": rng.uniform(0.05, 0.6, n), "input_token_length": _prompts(n, rng),
            "num_request_waiting": rng.poisson(load / MEAN_PROMPT).astype(np.float64),
            "num_request_running": rng.integers(1, 64, n).astype(np.float64),
            "num_tokens_generated": np.zeros(n),
            "prefix_cache_score": np.where(rng.random(n) < 0.5, 0.0, rng.uniform(0.0, 0.95, n)),
            "prefill_tokens_in_flight": np.round(load), "decode_tokens_in_flight": rng.integers(0, 60_000, n) * 1.0}


def ttft_median(cols: Columns, work: np.ndarray) -> np.ndarray:
    """~10k prefill tokens/s: the queued prefill drains first, then the uncached prompt."""
    effective = (1.0 - cols["prefix_cache_score"]) * cols["input_token_length"]
    return 25.0 + 0.1 * effective + 0.1 * work


def tpot_features(load: np.ndarray, rng: np.random.Generator) -> Columns:
    n = len(load)
    kv = 1.0 - np.exp(-load / KV_TOKENS) + rng.normal(0.0, 0.02, n)
    return {"kv_cache_percentage": kv.clip(0.0, 1.0), "input_token_length": _prompts(n, rng),
            "num_request_waiting": np.where(rng.random(n) < 0.6, 0, rng.geometric(0.3, n)).astype(np.float64),
            "num_request_running": 1.0 + rng.poisson(load / MEAN_CONTEXT),
            "num_tokens_generated": np.zeros(n), "prefix_cache_score": np.zeros(n),
            "prefill_tokens_in_flight": rng.integers(0, 4000, n) * 1.0, "decode_tokens_in_flight": np.round(load)}


def tpot_median(cols: Columns, work: np.ndarray) -> np.ndarray:
    """A memory-bound decode step: per-sequence cost and the KV read of every token in flight."""
    return 6.0 + 0.04 * cols["num_request_running"] + 0.00025 * work


TARGETS: Mapping[str, Target] = MappingProxyType({
    "ttft": Target("ttft", 20_000.0, ttft_features, ttft_median),
    "tpot": Target("tpot", 100_000.0, tpot_features, tpot_median),
})


@dataclass(frozen=True)
class Family:
    """A median law per target (work term ``cap · (load / cap)^exponent``, a slow pod class) and a noise law."""

    name: str
    summary: str
    noise: Mapping[str, Noise]
    exponent: float = 1.0
    slow_factor: float = 1.0
    """> 1: half the rows come from ``pod_class`` SLOW pods, this much slower."""

    def truth(self, target: Target, cols: Columns, load: np.ndarray, classes: np.ndarray) -> np.ndarray:
        """Median ms of each row (before noise)."""
        work = target.cap * (load / target.cap) ** self.exponent
        factor = np.where(classes == SLOW, self.slow_factor, 1.0)
        return target.median(cols, work) * factor

    def classes(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if self.slow_factor == 1.0:
            return np.full(n, "", dtype=object)
        return np.where(rng.random(n) < 0.5, SLOW, FAST).astype(object)


FAMILIES: Mapping[str, Family] = MappingProxyType({f.name: f for f in (
    Family("linear_lognormal", "linear in the work, log-normal noise (σ 0.3 TTFT, 0.2 TPOT)",
           {"ttft": LogNormal(0.3), "tpot": LogNormal(0.2)}),
    Family("linear_additive", "linear in the work, additive exponential noise (mean 150 ms TTFT, 4 ms TPOT)",
           {"ttft": AdditiveExp(150.0), "tpot": AdditiveExp(4.0)}),
    Family("two_classes", f"linear, log-normal (σ 0.25 / 0.15); half the rows on {SLOW} pods, 1.6× slower",
           {"ttft": LogNormal(0.25), "tpot": LogNormal(0.15)}, slow_factor=1.6),
    Family("superlinear", "work term cap·(load/cap)^1.2 (1.5× linear at 8×), log-normal (σ 0.25 / 0.15)",
           {"ttft": LogNormal(0.25), "tpot": LogNormal(0.15)}, exponent=1.2),
    Family("overhead_tail", "fixed overhead (150 ms TTFT, 3 ms TPOT) + linear × (1 + Lomax(α 3, λ 0.3))",
           {"ttft": OverheadLomax(150.0), "tpot": OverheadLomax(3.0)}),
)})


@dataclass(frozen=True)
class Sample:
    """Wire rows of one target with each row's true p90 (and its latent load multiple, for test rows)."""

    rows: list[dict[str, Any]]
    p90: np.ndarray
    multiple: np.ndarray


def _wire(cols: Columns, classes: np.ndarray, i: int) -> dict[str, Any]:
    row: dict[str, Any] = {k: (int(v[i]) if k in INT_FIELDS else float(v[i])) for k, v in cols.items()}
    if classes[i]:
        row["pod_class"] = str(classes[i])
    return row


def sample(family: Family, target: Target, load: np.ndarray, rng: np.random.Generator, labelled: bool,
           multiple: np.ndarray | None = None) -> Sample:
    """Rows at ``load``; ``labelled`` rows carry an observed latency (training), others are prediction requests."""
    cols = target.features(load, rng)
    classes = family.classes(len(load), rng)
    median = family.truth(target, cols, load, classes)
    noise = family.noise[target.name]
    rows = [_wire(cols, classes, i) for i in range(len(load))]
    if labelled:
        observed = noise.draw(median, rng)
        for row, y in zip(rows, observed, strict=True):
            row.update({field: 0.0 for field in TARGET_OF.values()})
            row[TARGET_OF[target.name]] = float(y)
    return Sample(rows, noise.p90(median), np.zeros(len(load)) if multiple is None else multiple)


def train_sample(family: Family, target: Target, n: int, rng: np.random.Generator) -> Sample:
    return sample(family, target, rng.uniform(0.0, target.cap, n), rng, labelled=True)


def probe_sample(family: Family, target: Target, n_per_multiple: int, rng: np.random.Generator) -> Sample:
    multiple = np.repeat(np.array(MULTIPLES, dtype=np.float64), n_per_multiple)
    load = multiple * target.cap * rng.uniform(1.0 - TEST_JITTER, 1.0, len(multiple))
    return sample(family, target, load, rng, labelled=False, multiple=multiple)
