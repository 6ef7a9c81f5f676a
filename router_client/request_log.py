"""Recent requests as the proxy saw them, and exact coverage counts since start, per pool.

One record per dispatched request (fed by the proxy when a response ends): where it went, what the router
predicted *at dispatch* (the p-quantile it acted on, after the per-pod correction, and the raw model's),
what the router then measured (TTFT = upstream request sent → first content chunk; TPOT from the end of
the stream), and wall-clock stamps of received / dispatched / first token / end so a client can split its
own latency into its parts. The newest ``size`` records are kept (``after(seq)`` pages through them); the
per-pool coverage counters are never trimmed, so a run's coverage is exact however long it is.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import asdict, dataclass, field
from itertools import islice
from typing import Any

from router_client.router import Decision

TARGETS = ("ttft", "tpot")


@dataclass(frozen=True)
class RequestRecord:
    seq: int
    request_id: str
    pool: str
    pod: str
    fallback: bool
    predicted_ttft_ms: float | None
    predicted_tpot_ms: float | None
    raw_predicted_ttft_ms: float | None
    raw_predicted_tpot_ms: float | None
    ttft_ms: float | None
    tpot_ms: float | None
    output_tokens: int
    error: str | None
    received_at: float
    """Wall-clock seconds: request body read by the proxy."""
    dispatched_at: float
    """Wall-clock seconds: upstream request about to be sent (after the routing decision)."""
    first_token_at: float | None
    ended_at: float
    prompt_tokens: int = 0
    """Prompt tokens the decision used (exact, or estimated from bytes)."""
    prefix_cache_score: float | None = None
    """The router's estimate, at dispatch, of the share of the prompt cached on the chosen pod."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Coverage:
    """Pairs and covered pairs since start: acted-on prediction and raw model prediction."""

    pairs: int = 0
    covered: int = 0
    model_covered: int = 0

    def add(self, predicted: float | None, raw: float | None, actual: float | None) -> None:
        if predicted is None or actual is None:
            return
        self.pairs += 1
        self.covered += actual <= predicted
        self.model_covered += actual <= (predicted if raw is None else raw)

    def as_dict(self) -> dict[str, Any]:
        share = (lambda n: n / self.pairs) if self.pairs else (lambda n: None)
        return {"pairs": self.pairs, "coverage": share(self.covered), "model_coverage": share(self.model_covered)}


@dataclass
class _PoolCounts:
    requests: int = 0
    errors: int = 0
    coverage: dict[str, Coverage] = field(default_factory=lambda: {t: Coverage() for t in TARGETS})


def _score(value: float | int | str | None) -> float | None:
    return float(value) if isinstance(value, int | float) else None


class RequestLog:
    """Single-threaded (the proxy's event loop): ``add`` per finished request, readers take copies."""

    def __init__(self, size: int = 20_000) -> None:
        self._records: deque[RequestRecord] = deque(maxlen=size)
        self._pools: dict[str, _PoolCounts] = {}
        self._seq = 0
        self._wall_offset = time.time() - time.monotonic()

    def wall(self, monotonic_s: float) -> float:
        """A ``time.monotonic`` reading as wall-clock seconds."""
        return monotonic_s + self._wall_offset

    def add(self, d: Decision, ttft_ms: float | None, tpot_ms: float | None, output_tokens: int, error: str | None,
            received: float, started: float, e2e_ms: float) -> None:
        """One finished request; ``d`` is the router's ``Decision``, times are ``time.monotonic`` readings."""
        self._seq += 1
        first = None if ttft_ms is None or error is not None else self.wall(started) + ttft_ms / 1e3
        rec = RequestRecord(self._seq, d.request_id, d.pool, d.pod_url or "", d.fallback, d.predicted_ttft_ms,
                            d.predicted_tpot_ms, d.raw_predicted_ttft_ms, d.raw_predicted_tpot_ms,
                            None if error else ttft_ms, None if error else tpot_ms, output_tokens, error,
                            self.wall(received), self.wall(started), first, self.wall(started) + e2e_ms / 1e3,
                            d.prompt_tokens, _score(d.features.get("prefix_cache_score")))
        self._records.append(rec)
        counts = self._pools.setdefault(d.pool, _PoolCounts())
        counts.requests += 1
        if error is not None:
            counts.errors += 1
            return
        counts.coverage["ttft"].add(rec.predicted_ttft_ms, rec.raw_predicted_ttft_ms, rec.ttft_ms)
        counts.coverage["tpot"].add(rec.predicted_tpot_ms, rec.raw_predicted_tpot_ms, rec.tpot_ms)

    def after(self, seq: int, limit: int) -> list[RequestRecord]:
        """Up to ``limit`` records with a sequence number above ``seq``, oldest first."""
        if not self._records:
            return []
        start = max(0, seq + 1 - self._records[0].seq)
        return list(islice(self._records, start, start + max(0, limit)))

    def recent(self, pool: str, n: int) -> list[RequestRecord]:
        """The newest ``n`` records of ``pool``, oldest first."""
        return list(islice((r for r in reversed(self._records) if r.pool == pool), n))[::-1]

    @property
    def last_seq(self) -> int:
        return self._seq

    def totals(self) -> dict[str, Any]:
        return {pool: {"requests": c.requests, "errors": c.errors,
                       **{t: cov.as_dict() for t, cov in c.coverage.items()}}
                for pool, c in sorted(self._pools.items())}
