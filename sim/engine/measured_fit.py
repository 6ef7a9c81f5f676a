"""Fit :class:`StepFit` to points measured on a real engine (client-side TTFT and TPOT).

Each point is written as the steps the simulator's scheduler would run for it, so the fit inverts the same
model the simulator uses forward:

- a **prefill point** (one request alone, ``context`` tokens already cached, ``tokens`` new ones, median
  TTFT) = ``frontend`` + the prefill chunks of at most ``max_num_batched_tokens`` tokens, chunk ``i`` with
  ``q_i`` tokens at context ``ctx_i`` costing one step of ``q_i`` tokens, 1 sequence,
  ``q_i * (ctx_i + q_i / 2)`` attention;
- a **decode point** (``batch`` requests decoding together at mean context ``context``, median TPOT) = one
  step of ``batch`` tokens, ``batch`` sequences, ``batch * context`` cached tokens read, ``unique_kv`` of them
  distinct (a shared cached base counts once; the default, every context distinct).

Every point is linear in the unknowns ``frontend, overhead, per_seq, token_ms(knot_2..knot_K), c_pf, c_dec``
and, when some decode points say how many of their cached tokens are distinct, ``c_uniq`` (``token_ms``
piecewise linear through the knots), solved by least squares on relative error; a negative scalar coefficient
is pinned to 0 and the rest refitted. Decode points that share one base and points with distinct contexts
separate ``c_dec`` (compute, every token) from ``c_uniq`` (memory, each distinct token once).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sim.engine.errors import ConfigError
from sim.engine.stepfit import StepFit

DEFAULT_KNOTS = (1, 16, 32, 64, 128, 256, 512, 1024, 1536, 2048)


@dataclass(frozen=True)
class PrefillPoint:
    tokens: int
    context: int
    ttft_ms: tuple[float, ...]


@dataclass(frozen=True)
class DecodePoint:
    batch: int
    context: float
    tpot_ms: tuple[float, ...]
    step_cv: float = 0.0
    """Robust relative spread of the single inter-token gaps (one step each)."""
    unique_kv: float | None = None
    """Distinct cached tokens the batch reads per step (None: ``batch * context``, every context distinct)."""


@dataclass(frozen=True)
class Step:
    tokens: int
    seqs: int
    prefill_qk: float
    decode_kv: float
    unique_kv: float = 0.0


def prefill_steps(tokens: int, context: int, budget: int) -> list[Step]:
    """The chunks a lone request's prefill runs in under a token budget of ``budget``."""
    steps, done = [], 0
    while done < tokens:
        q = min(budget, tokens - done)
        steps.append(Step(q, 1, q * (context + done + q / 2.0), 0.0, 0.0))
        done += q
    return steps


def decode_step(point: DecodePoint) -> Step:
    kv = point.batch * point.context
    return Step(point.batch, point.batch, 0.0, kv, kv if point.unique_kv is None else point.unique_kv)


def knot_grid(budget: int, knots: Sequence[int] = DEFAULT_KNOTS) -> tuple[int, ...]:
    return tuple(sorted({k for k in knots if k < budget} | {1, budget}))


def _token_weights(tokens: int, knots: Sequence[int]) -> np.ndarray:
    """Weights of ``token_ms(tokens)`` on the knot values (piecewise linear, straight beyond the last)."""
    w = np.zeros(len(knots))
    j = int(np.searchsorted(knots, tokens, side="right")) - 1
    j = min(max(j, 0), len(knots) - 2)
    lo, hi = knots[j], knots[j + 1]
    frac = (tokens - lo) / (hi - lo)
    w[j], w[j + 1] = 1.0 - frac, frac
    return w


SCALARS = ("frontend_ms", "overhead_ms", "per_seq_ms", "prefill_ms_per_qk", "decode_ms_per_kv_token")


def separates_unique(decode: Sequence[DecodePoint]) -> bool:
    """Whether the points can tell distinct cached tokens from shared ones (some say how many are distinct)."""
    return any(d.unique_kv is not None and d.unique_kv < d.batch * d.context for d in decode)


def _row(steps: Sequence[Step], frontend: bool, knots: Sequence[int], unique: bool) -> np.ndarray:
    tok = sum((_token_weights(s.tokens, knots) for s in steps), np.zeros(len(knots)))[1:]
    head = [1.0 if frontend else 0.0, float(len(steps)), float(sum(s.seqs for s in steps))]
    tail = [sum(s.prefill_qk for s in steps), sum(s.decode_kv for s in steps)]
    if unique:
        tail.append(sum(s.unique_kv for s in steps))
    return np.concatenate([head, tok, tail])


def design(prefill: Sequence[PrefillPoint], decode: Sequence[DecodePoint], budget: int,
           knots: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    unique = separates_unique(decode)
    rows = [_row(prefill_steps(p.tokens, p.context, budget), True, knots, unique) for p in prefill]
    rows += [_row([decode_step(d)], False, knots, unique) for d in decode]
    y = [statistics.median(p.ttft_ms) for p in prefill] + [statistics.median(d.tpot_ms) for d in decode]
    return np.array(rows), np.array(y)


def _solve(x: np.ndarray, y: np.ndarray, scalar_cols: Sequence[int]) -> np.ndarray:
    """Least squares on relative residuals; scalar columns that come out negative are pinned to 0."""
    w = 1.0 / y
    free = list(range(x.shape[1]))
    while True:
        coef = np.zeros(x.shape[1])
        sol, *_ = np.linalg.lstsq(x[:, free] * w[:, None], y * w, rcond=None)
        coef[free] = sol
        negative = [c for c in scalar_cols if c in free and coef[c] < 0]
        if not negative:
            return coef
        free.remove(min(negative, key=lambda c: coef[c]))


def fit_points(prefill: Sequence[PrefillPoint], decode: Sequence[DecodePoint], budget: int,
               knots: Sequence[int] = DEFAULT_KNOTS) -> StepFit:
    """Fit the step model to the points (needs prefill and decode points spanning the knots)."""
    grid = knot_grid(budget, knots)
    if not prefill or not decode:
        raise ConfigError("a measured profile needs both prefill and decode points")
    x, y = design(prefill, decode, budget, grid)
    if x.shape[0] < x.shape[1]:
        raise ConfigError(f"{x.shape[0]} measured points cannot fit {x.shape[1]} unknowns")
    n_tok = len(grid) - 1
    scalar_cols = [0, 1, 2, 3 + n_tok, 4 + n_tok] + ([5 + n_tok] if separates_unique(decode) else [])
    coef = _solve(x, y, scalar_cols)
    rel = (x @ coef - y) / y
    knot_ms = ((1, 0.0), *zip(grid[1:], (float(v) for v in coef[3:3 + n_tok]), strict=True))
    cvs = [d.step_cv for d in decode if d.step_cv > 0]
    return StepFit(
        frontend_ms=float(coef[0]), overhead_ms=float(coef[1]), per_seq_ms=float(coef[2]),
        prefill_ms_per_qk=float(coef[3 + n_tok]), decode_ms_per_kv_token=float(coef[4 + n_tok]),
        knots=knot_ms, noise_std=float(statistics.median(cvs)) if cvs else 0.0,
        rel_rmse=float(np.sqrt(np.mean(rel**2))),
        decode_ms_per_unique_kv_token=float(coef[5 + n_tok]) if len(coef) > 5 + n_tok else 0.0,
    )


def predicted_ms(fit: StepFit, prefill: Sequence[PrefillPoint], decode: Sequence[DecodePoint],
                 budget: int) -> list[float]:
    """The fit's prediction for every point (prefill first), for residual tables."""
    table = fit.token_ms_table(budget)

    def step_ms(s: Step) -> float:
        return (fit.overhead_ms + fit.per_seq_ms * s.seqs + table[s.tokens]
                + fit.prefill_ms_per_qk * s.prefill_qk + fit.decode_ms_per_kv_token * s.decode_kv
                + fit.decode_ms_per_unique_kv_token * s.unique_kv)

    out = [fit.frontend_ms + sum(step_ms(s) for s in prefill_steps(p.tokens, p.context, budget))
           for p in prefill]
    return out + [step_ms(decode_step(d)) for d in decode]
