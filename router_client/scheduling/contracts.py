"""Scheduling contracts: what filters, scorers and pickers receive and return.

The engine (``scheduling.engine``) owns the rules: it clamps scores to [0, 1], applies weights,
and owns the "no endpoint" outcome. Plugins stay small, pure and never raise on the hot path.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """One pod of the chosen pool as the router sees it for this request (keyword fields; the router and the
    replay policies build it with :func:`router_client.candidates.candidates`)."""

    pod: str
    kv_cache: float
    """Scraped KV-cache usage, 0..1."""
    waiting: int
    """Scraped waiting requests."""
    running: int
    """Router-side in-flight requests."""
    prefill_tokens_in_flight: int
    prefix_score: float
    """Router-side prefix-cache score, 0..1."""
    predicted_ttft_ms: float | None = None
    predicted_tpot_ms: float | None = None
    row: int = 0
    """Index of this pod's feature row (stable across filtering)."""
    admit_ttft_ms: float | None = None
    admit_tpot_ms: float | None = None
    """Predictions at the admission quantile (SLO admission), when configured; else the routing ones."""

    @property
    def has_prediction(self) -> bool:
        return self.predicted_ttft_ms is not None and self.predicted_tpot_ms is not None

    @property
    def admission(self) -> Candidate:
        """This candidate as SLO admission sees it (its admission-quantile predictions, when there are any)."""
        if self.admit_ttft_ms is None or self.admit_tpot_ms is None:
            return self
        return replace(self, predicted_ttft_ms=self.admit_ttft_ms, predicted_tpot_ms=self.admit_tpot_ms)


@dataclass(frozen=True, slots=True)
class SchedulingRequest:
    request_id: str
    prompt_tokens: int
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    sheddable: bool = False


class Filter(Protocol):
    """Keep a subset of candidates. Returning all is always allowed; returning none means "no endpoint"."""

    name: str

    def filter(self, request: SchedulingRequest, candidates: Sequence[Candidate]) -> Sequence[Candidate]: ...


class Scorer(Protocol):
    """One score per candidate, in order; the engine clamps to [0, 1] and applies the weight."""

    name: str

    def score(self, request: SchedulingRequest, candidates: Sequence[Candidate]) -> Sequence[float]: ...


class Picker(Protocol):
    """Index of the chosen candidate given the weighted total scores."""

    name: str

    def pick(self, candidates: Sequence[Candidate], scores: Sequence[float], rng: random.Random) -> int: ...
