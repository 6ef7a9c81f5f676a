"""How fast this machine runs the engine against the machine its profile was measured on: a few requests, at start.

A measured profile (``bench.engine_profile``) levels the real-engine prior for the machine it was measured on; the
same VM type ran the same engine 1.4–1.6× slower in one session than in another (BENCHMARKS.md, "Real engines"), and
a prior that is 1.5× fast under-covers until the trainer has rows to raise it. Before the load starts, the idle
engine gets a warm-up request and then cold prefills of the sizes the profile measured alone (fresh random token
ids: no prefix-cache hit, one output token); the median of (measured TTFT ÷ the profile's median TTFT at that size)
is the machine's slowdown, which multiplies the prior's speed factor (``demo.prior``).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Sequence

import httpx
import orjson

from sim.engine.measured import MeasuredProfile
from sim.workload.tokens import FIRST_ID

PROBE_TOKENS = (256, 512, 1024)
RATIO_BOUNDS = (0.25, 4.0)


class ProbeError(RuntimeError):
    """The engine did not answer a probe request with a streamed token."""


def profile_ttft_ms(profile: MeasuredProfile, tokens: int) -> float:
    """The profile's median TTFT of a cold prefill of ``tokens`` tokens alone (``ProbeError`` when not measured)."""
    for p in profile.prefill:
        if p.tokens == tokens and p.context == 0 and p.ttft_ms:
            return float(statistics.median(p.ttft_ms))
    raise ProbeError(f"the profile has no cold prefill point of {tokens} tokens")


def ttft_ms(client: httpx.Client, url: str, prompt: Sequence[int], model: str) -> float:
    """Time to the first streamed token of one completion of ``prompt`` (token ids)."""
    body = orjson.dumps({"model": model, "prompt": list(prompt), "max_tokens": 1, "ignore_eos": True,
                         "temperature": 0.0, "stream": True})
    started = time.monotonic()
    with client.stream("POST", url + "/v1/completions", content=body,
                       headers={"content-type": "application/json"}) as resp:
        if resp.status_code != 200:
            raise ProbeError(f"{url} answered {resp.status_code}: {resp.read()[:200]!r}")
        for line in resp.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                return (time.monotonic() - started) * 1000.0
    raise ProbeError(f"{url} streamed no token")


def slowdown(profile: MeasuredProfile, url: str, vocab: int, model: str = "tiny", reps: int = 2,
             seed: int = 0, sizes: Sequence[int] = PROBE_TOKENS) -> float:
    """This machine's engine TTFT ÷ the profile's, the median over ``sizes`` × ``reps`` cold prefills, within
    ``RATIO_BOUNDS``."""
    rng = random.Random(seed)

    def prompt(n: int) -> list[int]:
        return [rng.randrange(FIRST_ID, vocab) for _ in range(n)]

    ratios = []
    with httpx.Client(timeout=60.0) as client:
        ttft_ms(client, url, prompt(16), model)  # warm-up: the first request of a fresh engine is slower
        for _ in range(reps):
            for n in sizes:
                ratios.append(ttft_ms(client, url, prompt(n), model) / profile_ttft_ms(profile, n))
    return min(max(statistics.median(ratios), RATIO_BOUNDS[0]), RATIO_BOUNDS[1])
