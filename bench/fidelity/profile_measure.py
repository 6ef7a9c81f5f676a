"""The measurements behind a measured engine profile, taken on one real engine through its HTTP API.

- **Prefill**: one request alone with ``context`` tokens already in the prefix cache (a warm-up request sent
  the same base first; cold prompts are fresh random ids) and ``tokens`` new ones; TTFT. Grid up to the
  2,048-token budget and beyond it (3,072 / 4,000 tokens run as two chunks), and at contexts of 1–3k tokens
  (attention cost vs context).
- **Decode**: ``batch`` requests sent together that share a cached ``context``-token base and have 16 tokens
  of their own; TPOT over the window in which all of them decode (after the last first token, before the
  first last token), at batch 1–128 and context 0–3k. Then the same with a **distinct** ``context``-token
  prompt per request (as under traffic, where every sequence reads its own KV: on a CPU a shared base is read
  from cache, distinct contexts from memory, up to 2.3x slower at batch 32), at batch 2–32 and context 1k and
  3k, bounded by the KV pool. Each point records how many of its cached tokens are distinct (``unique_kv``),
  which lets the fit tell the compute cost of a cached token from the cost of reading a distinct one.

Everything is repeated ``reps`` times, the repetitions interleaved so slow phases of a shared machine
spread over all points.
"""

from __future__ import annotations

import asyncio
import random
import statistics
from collections.abc import Sequence

import httpx

from bench.fidelity.engine_run import log
from bench.fidelity.engine_stream import StreamTiming, engine_client, stream_completion
from sim.engine.measured_fit import DecodePoint, PrefillPoint
from sim.workload.tokens import FIRST_ID

PREFILL_COLD = (1, 16, 64, 128, 256, 512, 1024, 1536, 2048, 3072, 4000)
PREFILL_WARM = ((128, 1024), (512, 1024), (1024, 1024), (128, 2048), (512, 2048), (1024, 2048), (128, 3072),
                (512, 3072))
"""``(new tokens, cached context)``."""
DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
DECODE_CONTEXTS = (0, 1024, 3072)
DISTINCT_BATCHES = (2, 4, 8, 16, 32)
DISTINCT_CONTEXTS = (1024, 3072)
KV_SHARE = 0.8
"""Distinct-context points use at most this share of the engine's KV pool (no preemption in the window)."""
OWN_TOKENS = 16
"""Tokens of its own each decode request has after the shared base."""
MIN_WINDOW_TOKENS = 6


class Prompts:
    """Fresh random token ids (never repeated, so never a prefix-cache hit unless asked for)."""

    def __init__(self, vocab: int, seed: int) -> None:
        self._rng = random.Random(seed)
        self._vocab = vocab

    def ids(self, n: int) -> list[int]:
        return [self._rng.randrange(FIRST_ID, self._vocab) for _ in range(n)]


def _checked(timing: StreamTiming) -> StreamTiming:
    if not timing.ok:
        raise RuntimeError(f"engine request failed: status {timing.status} {timing.error}")
    return timing


async def prefill_ttft_ms(client: httpx.AsyncClient, url: str, prompts: Prompts, tokens: int,
                          base: Sequence[int]) -> float:
    if base:
        _checked(await stream_completion(client, url, [*base, *prompts.ids(1)], 1))
    timing = _checked(await stream_completion(client, url, [*base, *prompts.ids(tokens)], 2))
    return timing.ttft_s * 1e3


Sample = tuple[float, float, float, float]
"""``(median TPOT ms over the requests, mean context, robust CV of single gaps, distinct cached tokens)``."""


def distinct_tokens(batch: int, context: float) -> int:
    """Tokens a distinct-context point holds in the KV pool at its end."""
    return int(batch * (context + OWN_TOKENS + distinct_max_tokens(batch, int(context))))


def distinct_max_tokens(batch: int, context: int) -> int:
    """Output long enough that the first request still decodes once the last has prefilled (one chunk per
    step of the 2,048-token budget, the others decoding beside it)."""
    return 32 + batch // 2 + -(-batch * (context + OWN_TOKENS) // (2048 - batch))


async def decode_point(client: httpx.AsyncClient, url: str, prompts: Prompts, batch: int,
                       base: Sequence[int]) -> Sample | None:
    """A shared-base point (see :data:`Sample`); None when the requests did not overlap long enough (their
    admission spread over most of their decode)."""
    if base:
        _checked(await stream_completion(client, url, [*base, *prompts.ids(1)], 1))
    max_tokens = 32 + batch // 2
    calls = [stream_completion(client, url, [*base, *prompts.ids(OWN_TOKENS)], max_tokens) for _ in range(batch)]
    point = _window([_checked(t) for t in await asyncio.gather(*calls)], batch, len(base) + OWN_TOKENS)
    if point is None:
        return None
    tpot, context, cv = point
    return tpot, context, cv, len(base) + batch * (context - len(base))


async def distinct_point(client: httpx.AsyncClient, url: str, prompts: Prompts, batch: int,
                         context: int) -> Sample | None:
    """``batch`` requests with a distinct ``context``-token prompt each (nothing shared, nothing cached)."""
    max_tokens = distinct_max_tokens(batch, context)
    calls = [stream_completion(client, url, prompts.ids(context + OWN_TOKENS), max_tokens) for _ in range(batch)]
    point = _window([_checked(t) for t in await asyncio.gather(*calls)], batch, context + OWN_TOKENS)
    if point is None:
        return None
    tpot, mean_context, cv = point
    return tpot, mean_context, cv, batch * mean_context


def _window(timings: list[StreamTiming], batch: int, prompt: int) -> tuple[float, float, float] | None:
    """TPOT, mean context and gap CV over the window in which all ``timings`` (``prompt`` tokens each)
    decode."""
    start = max(t.token_times[0] for t in timings)
    end = min(t.token_times[-1] for t in timings)
    tpots, contexts, gaps = [], [], []
    for t in timings:
        idx = [j for j, x in enumerate(t.token_times) if start <= x <= end]
        if len(idx) < MIN_WINDOW_TOKENS:
            continue
        times = [t.token_times[j] for j in idx]
        tpots.append((times[-1] - times[0]) / (len(times) - 1) * 1e3)
        contexts.append(prompt + statistics.fmean(idx) + 1)
        gaps += [(b - a) * 1e3 for a, b in zip(times, times[1:], strict=False)]
    if len(tpots) < (batch + 1) // 2:
        log(f"decode batch {batch}, prompt {prompt}: only {len(tpots)} requests decoded {MIN_WINDOW_TOKENS} tokens "
            "alongside all others; point skipped")
        return None
    med = statistics.median(gaps)
    mad = statistics.median(abs(g - med) for g in gaps)
    return statistics.median(tpots), statistics.fmean(contexts), 1.4826 * mad / med if med > 0 else 0.0


def distinct_grid(kv_tokens: int) -> list[tuple[int, int]]:
    """``(batch, context)`` of the distinct-context points that fit the KV pool's :data:`KV_SHARE`."""
    return [(b, c) for c in DISTINCT_CONTEXTS for b in DISTINCT_BATCHES
            if distinct_tokens(b, c) <= KV_SHARE * kv_tokens]


def _decode_points(samples: dict[tuple[int, int], list[Sample]]) -> list[DecodePoint]:
    return [DecodePoint(b, statistics.fmean(s[1] for s in v), tuple(s[0] for s in v),
                        statistics.median(s[2] for s in v), statistics.fmean(s[3] for s in v))
            for (b, _), v in samples.items() if v]


async def measure(url: str, vocab: int, reps: int, seed: int = 0,
                  kv_tokens: int = 0) -> tuple[list[PrefillPoint], list[DecodePoint]]:
    """Every point ``reps`` times (distinct-context decode points only up to ``kv_tokens``' share)."""
    prompts = Prompts(vocab, seed)
    cold: dict[int, list[float]] = {n: [] for n in PREFILL_COLD}
    warm: dict[tuple[int, int], list[float]] = {k: [] for k in PREFILL_WARM}
    dec: dict[tuple[int, int], list[Sample]] = {(b, c): [] for c in DECODE_CONTEXTS for b in DECODE_BATCHES}
    distinct: dict[tuple[int, int], list[Sample]] = {k: [] for k in distinct_grid(kv_tokens)}
    async with engine_client() as client:
        for rep in range(reps):
            bases = {c: prompts.ids(c) for c in {0, *DECODE_CONTEXTS, *(c for _, c in PREFILL_WARM)}}
            for n in PREFILL_COLD:
                cold[n].append(await prefill_ttft_ms(client, url, prompts, n, ()))
            log(f"rep {rep + 1}/{reps}: cold prefill TTFT ms " + ", ".join(f"{n}:{v[-1]:.0f}" for n, v in cold.items()))
            for n, c in PREFILL_WARM:
                warm[(n, c)].append(await prefill_ttft_ms(client, url, prompts, n, bases[c]))
            log(f"rep {rep + 1}/{reps}: prefill at context TTFT ms "
                + ", ".join(f"{n}@{c}:{v[-1]:.0f}" for (n, c), v in warm.items()))
            for (b, c), samples in dec.items():
                point = await decode_point(client, url, prompts, b, bases[c])
                if point is not None:
                    samples.append(point)
            log(f"rep {rep + 1}/{reps}: decode TPOT ms (shared base) "
                + ", ".join(f"{b}@{c}:{v[-1][0]:.1f}" for (b, c), v in dec.items() if v))
            for (b, c), samples in distinct.items():
                point = await distinct_point(client, url, prompts, b, c)
                if point is not None:
                    samples.append(point)
            log(f"rep {rep + 1}/{reps}: decode TPOT ms (distinct contexts) "
                + ", ".join(f"{b}@{c}:{v[-1][0]:.1f}" for (b, c), v in distinct.items() if v))
    prefill = [PrefillPoint(n, 0, tuple(v)) for n, v in cold.items()]
    prefill += [PrefillPoint(n, c, tuple(v)) for (n, c), v in warm.items()]
    return prefill, _decode_points(dec) + _decode_points(distinct)
