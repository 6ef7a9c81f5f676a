"""The physical base of a latency model: a few non-negative coefficients on the work ahead of a request.

A model's served value is ``inverse_transform(transform(base(x)) + trees(x))`` (*residual* mode): the base is
linear in *terms* of the model's own feature columns — the constant ``"1"``, a column
(``"prefill_tokens_in_flight"``) or a product of two (``"effective_input_tokens*input_token_length"``) — with
coefficients ≥ 0 in ms per unit. Every feature is ≥ 0 (``shared.columns`` refuses negatives), so the base never
falls when a load feature grows, and past the largest load the trees saw (where they are constant) the base alone
carries the growth. ``transform`` is the entry's ``target_transform``: ``log1p`` (the trees learnt
``log1p(y) − log1p(base)``) or ``identity`` (``y − base``).

A base may instead carry a *window* — per load column, the largest value the fit saw — (*window* mode): the trees
then learnt the whole latency inside the window, and the base adds only its growth past it, in ms:
``inverse_transform(trees(x)) + base(x) − base(min(x, window))``. Both modes are non-decreasing in every load
column when the trees are (in residual mode the trees must be, since the base rises continuously under every split;
in window mode the growth is 0 inside the window and non-decreasing everywhere, terms being non-negative columns
and products of two).

TTFT's terms are the work ahead of the request on that pod: the request's own uncached prompt tokens (and their
attention over the whole prompt), the prefill tokens already in flight, the waiting requests and the decode batch
it joins. TPOT's are the decode batch: running requests, decode tokens in flight, KV use, and the prefill chunks
that share its steps. ``DEFAULT_COEFFICIENTS`` are a GPU roofline of a mid-size (~8B) model on one GPU — the
median latency the trainer's prior serves until rows arrive (``trainer.prior``).

Needs numpy only: the predictor evaluates it on its hot path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from shared.errors import BundleError

PRODUCT = "*"
CONSTANT = "1"
TERMS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "ttft": (CONSTANT, "effective_input_tokens", "prefill_tokens_in_flight", "num_request_waiting",
             "num_request_running", "effective_input_tokens*input_token_length"),
    "tpot": (CONSTANT, "num_request_running", "decode_tokens_in_flight", "kv_cache_percentage",
             "prefill_tokens_in_flight"),
})
"""Every term a model's base may use; a feature spec without a term's columns (e.g. no tokens in flight) drops it."""
DEFAULT_COEFFICIENTS: Mapping[str, Mapping[str, float]] = MappingProxyType({
    "ttft": MappingProxyType({CONSTANT: 25.0, "effective_input_tokens": 0.08, "prefill_tokens_in_flight": 0.04,
                              "num_request_waiting": 60.0, "num_request_running": 0.5,
                              "effective_input_tokens*input_token_length": 1e-6}),
    "tpot": MappingProxyType({CONSTANT: 8.0, "num_request_running": 0.12, "decode_tokens_in_flight": 0.0004,
                              "kv_cache_percentage": 12.0, "prefill_tokens_in_flight": 0.00002}),
})
"""Median ms per unit of each term: ~12k prefill tokens/s with queued work served first and each waiting request
about one prefill; a memory-bound decode step set by the batch and the KV it reads."""


def term_columns(term: str) -> tuple[str, ...]:
    """The feature columns a term multiplies (none for the constant)."""
    return () if term == CONSTANT else tuple(term.split(PRODUCT))


def model_terms(name: str, features: Sequence[str]) -> tuple[str, ...]:
    """``name``'s terms that ``features`` can compute."""
    have = set(features)
    return tuple(t for t in TERMS[name] if set(term_columns(t)) <= have)


@dataclass(frozen=True)
class Base:
    """Coefficients on terms; ``evaluate`` on a model's feature matrix gives the base in ms."""

    terms: tuple[str, ...]
    coefficients: tuple[float, ...]
    rows: int = 0
    """Rows the coefficients were fitted on (0: a default or a profile's)."""
    source: str = "default"
    """``default`` (``DEFAULT_COEFFICIENTS``), ``profile`` (learnt on a simulated engine) or ``fit``."""
    window: tuple[tuple[str, float], ...] = ()
    """Window mode: (column, the window's largest value) per load column; empty: residual mode."""

    @classmethod
    def default(cls, name: str, features: Sequence[str]) -> Base:
        terms = model_terms(name, features)
        return cls(terms, tuple(DEFAULT_COEFFICIENTS[name][t] for t in terms))

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"terms": list(self.terms), "coefficients": [float(c) for c in self.coefficients],
                                  "rows": self.rows, "source": self.source}
        if self.window:
            out["window"] = {c: float(v) for c, v in self.window}
        return out

    def columns(self) -> tuple[str, ...]:
        """Every feature column a term reads, in term order, once."""
        return tuple(dict.fromkeys(c for t in self.terms for c in term_columns(t)))

    def named(self) -> dict[str, float]:
        return dict(zip(self.terms, self.coefficients, strict=True))

    def compiled(self, features: Sequence[str]) -> BaseEvaluator:
        return BaseEvaluator.build(self, features)


@dataclass(frozen=True)
class BaseEvaluator:
    """A base bound to a feature order: ``(n, features)`` matrix → ``(n,)`` ms, float64."""

    constant: float
    linear: np.ndarray
    """Column index of each linear term."""
    linear_coef: np.ndarray
    pairs: np.ndarray
    """(k, 2) column indices of each product term."""
    pair_coef: np.ndarray
    window_cols: np.ndarray
    """Window mode: the column indices the window bounds (empty: residual mode) ..."""
    window_max: np.ndarray
    """... and each one's largest value."""

    @classmethod
    def build(cls, base: Base, features: Sequence[str]) -> BaseEvaluator:
        check(base, features)
        index = {f: j for j, f in enumerate(features)}
        constant, linear, linear_coef, pairs, pair_coef = 0.0, [], [], [], []
        for term, coef in zip(base.terms, base.coefficients, strict=True):
            cols = term_columns(term)
            if not cols:
                constant += coef
            elif len(cols) == 1:
                linear.append(index[cols[0]])
                linear_coef.append(coef)
            else:
                pairs.append((index[cols[0]], index[cols[1]]))
                pair_coef.append(coef)
        return cls(constant, np.array(linear, np.int64), np.array(linear_coef, np.float64),
                   np.array(pairs, np.int64).reshape(-1, 2), np.array(pair_coef, np.float64),
                   np.array([index[c] for c, _ in base.window], np.int64),
                   np.array([v for _, v in base.window], np.float64))

    def __call__(self, matrix: np.ndarray) -> np.ndarray:
        x = np.asarray(matrix, dtype=np.float64)
        out = x[:, self.linear] @ self.linear_coef + self.constant
        if len(self.pair_coef):
            out += (x[:, self.pairs[:, 0]] * x[:, self.pairs[:, 1]]) @ self.pair_coef
        return np.maximum(out, 0.0)

    def margin(self, matrix: np.ndarray, transform: str) -> np.ndarray:
        """The base in the trees' space: ``log1p(base)`` or the base itself (``identity``)."""
        base = self(matrix)
        return np.log1p(base) if transform == "log1p" else base

    @property
    def windowed(self) -> bool:
        return bool(len(self.window_cols))

    def growth(self, matrix: np.ndarray) -> np.ndarray:
        """Window mode: ``base(x) − base(min(x, window))`` in ms (0 inside the window), ``(n,)``."""
        x = np.asarray(matrix, dtype=np.float64)
        inside = x.copy()
        inside[:, self.window_cols] = np.minimum(x[:, self.window_cols], self.window_max)
        return np.maximum(self(x) - self(inside), 0.0)

    def apply(self, trees: np.ndarray, matrix: np.ndarray, transform: str) -> np.ndarray:
        """The served raw output ``(n, k)`` from the trees' own ``(n, k)``: plus the base's margin (residual mode),
        or plus its growth past the window in ms (window mode)."""
        if not self.windowed:
            return trees + self.margin(matrix, transform)[:, None]
        grown = self.growth(matrix)[:, None]
        if transform != "log1p":
            return trees + grown
        return np.log1p(np.maximum(np.expm1(trees) + grown, 0.0))


def check(base: Base, features: Sequence[str]) -> Base:
    """``base`` when every term is known, computable from ``features`` and has a finite coefficient ≥ 0."""
    if len(base.terms) != len(base.coefficients) or not base.terms:
        raise BundleError(f"base: {len(base.terms)} terms and {len(base.coefficients)} coefficients")
    if len(set(base.terms)) != len(base.terms):
        raise BundleError(f"base terms repeat: {list(base.terms)}")
    have = set(features)
    for term, coef in zip(base.terms, base.coefficients, strict=True):
        cols = term_columns(term)
        if len(cols) > 2 or not set(cols) <= have:
            raise BundleError(f"base term {term!r} is not {CONSTANT!r}, a feature column of the model or a product "
                              "of two")
        if not (np.isfinite(coef) and coef >= 0):
            raise BundleError(f"base coefficient of {term!r} must be finite and >= 0, got {coef!r}")
    for col, top in base.window:
        if col not in have or not (np.isfinite(top) and top >= 0):
            raise BundleError(f"base window {col!r}: {top!r} must be a feature column with a finite value >= 0")
    return base

