"""The eleven contract features drawn jointly, as one pod's load makes them move together.

A latent utilisation ``u`` per row (calm periods ~ Beta(2, 5), busy periods ~ Beta(6, 2)) drives
running requests, the queue (which appears only near saturation), KV usage and the tokens in
flight; prompt sizes are per request (lognormal, as the conv trace), longer prompts are more
often conversation continuations with a prefix-cache hit; one request in ten carries an encoder
input (multimodal). Written from these assumptions, not fitted to any model.
"""

from __future__ import annotations

import numpy as np

MAX_PROMPT = 32_000


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def load_features(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    busy = rng.random(n) < 0.35
    u = np.where(busy, rng.beta(6, 2, n), rng.beta(2, 5, n))
    running = np.minimum(1 + rng.poisson(4 + 90 * u**1.5), 256).astype(np.float64)
    queued = rng.random(n) < _sigmoid((u - 0.75) / 0.06)
    mean_queue = 1.0 + 20.0 * np.maximum(u - 0.6, 0.0)
    waiting = np.where(queued, rng.geometric(1.0 / mean_queue), 0).astype(np.float64)
    kv = np.clip(0.05 + 0.85 * u + 0.01 * waiting + rng.normal(0, 0.06, n), 0.0, 1.0)
    prompt = np.clip(np.round(rng.lognormal(6.6, 1.1, n)), 1, MAX_PROMPT)
    hit = rng.random(n) < 0.25 + 0.5 * _sigmoid(np.log(prompt) - 7.0)
    prefix = np.where(hit, rng.beta(4, 2, n), 0.0)
    decode_in_flight = np.round(running * rng.lognormal(5.3, 0.4, n))
    prefill_in_flight = np.round((waiting + rng.poisson(0.5 + 2 * u)) * rng.lognormal(6.3, 0.7, n))
    multimodal = rng.random(n) < 0.1
    encoder_in = np.where(multimodal, np.round(rng.lognormal(7.0, 0.4, n)), 0.0)
    encoder_matched = np.round(encoder_in * np.where(rng.random(n) < 0.4, rng.random(n), 0.0))
    return {
        "kv_cache_percentage": kv,
        "input_token_length": prompt,
        "num_request_waiting": waiting,
        "num_request_running": running,
        "num_tokens_generated": np.zeros(n),
        "prefix_cache_score": prefix,
        "pod_type": np.zeros(n),
        "prefill_tokens_in_flight": prefill_in_flight,
        "decode_tokens_in_flight": decode_in_flight,
        "encoder_input_size": encoder_in,
        "encoder_matched_size": encoder_matched,
    }


def effective_tokens(c: dict[str, np.ndarray]) -> np.ndarray:
    """Prompt tokens the prefill must compute: uncached text plus unmatched encoder input."""
    return (1 - c["prefix_cache_score"]) * c["input_token_length"] + 0.5 * (
        c["encoder_input_size"] - c["encoder_matched_size"])
