"""What P/D routing did: Prometheus series on the router's registry and the ``pd`` part of ``/status``.

Fed by the router (the decider's choice and the pair, at decision time) and by the proxy's two-phase request
(the prefill leg's time, the KV hand-over time, prefill failures). Recent times are kept per pool
(:data:`RECENT` values) for the status page's quantiles.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections import deque
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Histogram

_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
RECENT = 512
TOP_PAIRS = 20


class _PoolLog:
    def __init__(self) -> None:
        self.choices: Tally[str] = Tally()
        self.pairs: Tally[tuple[str, str]] = Tally()
        self.failures: Tally[tuple[str, str]] = Tally()
        self.prefill_ms: deque[float] = deque(maxlen=RECENT)
        self.handover_ms: deque[float] = deque(maxlen=RECENT)


def _quantiles(values: deque[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "p50": None, "p99": None}
    p50, p99 = np.quantile(np.fromiter(values, float), [0.5, 0.99])
    return {"n": len(values), "p50": round(float(p50), 3), "p99": round(float(p99), 3)}


class PdMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.choices = Counter("router_pd_decisions_total", "P/D decider choices (disaggregated, or why the decode "
                               "pod served the request whole).", ["pool", "choice"], registry=r)
        self.pairs = Counter("router_pd_pairs_total", "Disaggregated requests per (prefill pod, decode pod) pair.",
                             ["pool", "prefill_pod", "decode_pod"], registry=r)
        self.prefill = Histogram("router_pd_prefill_seconds", "Prefill leg: request sent to the prefill pod to its "
                                 "one-token answer with kv_transfer_params.", ["pool"], buckets=_SECONDS, registry=r)
        self.handover = Histogram("router_pd_kv_handover_seconds", "Decode leg to its first token: the decode pod "
                                  "pulls the prompt's KV (queue + transfer) and runs its first step.", ["pool"],
                                  buckets=_SECONDS, registry=r)
        self.failures = Counter("router_pd_prefill_failures_total", "Prefill legs that failed, by reason and what "
                                "the router did (aggregate: the decode pod served it whole; error: 502).",
                                ["pool", "reason", "action"], registry=r)
        self._pools: dict[str, _PoolLog] = {}

    def _log(self, pool: str) -> _PoolLog:
        found = self._pools.get(pool)
        if found is None:
            found = self._pools[pool] = _PoolLog()
        return found

    def chose(self, pool: str, choice: str, prefill_pod: str | None, decode_pod: str) -> None:
        self.choices.labels(pool, choice).inc()
        log = self._log(pool)
        log.choices[choice] += 1
        if prefill_pod is not None:
            self.pairs.labels(pool, prefill_pod, decode_pod).inc()
            log.pairs[(prefill_pod, decode_pod)] += 1

    def prefilled(self, pool: str, seconds: float) -> None:
        self.prefill.labels(pool).observe(seconds)
        self._log(pool).prefill_ms.append(seconds * 1000.0)

    def handed_over(self, pool: str, seconds: float) -> None:
        self.handover.labels(pool).observe(seconds)
        self._log(pool).handover_ms.append(seconds * 1000.0)

    def prefill_failed(self, pool: str, reason: str, action: str) -> None:
        self.failures.labels(pool, reason, action).inc()
        self._log(pool).failures[(reason, action)] += 1

    def status(self) -> dict[str, Any]:
        """Per P/D pool: the decider's choices, the busiest pairs, recent prefill / hand-over ms, failures."""
        return {pool: {
            "choices": dict(log.choices),
            "pairs": [{"prefill": p, "decode": d, "requests": n} for (p, d), n in log.pairs.most_common(TOP_PAIRS)],
            "prefill_ms": _quantiles(log.prefill_ms),
            "kv_handover_ms": _quantiles(log.handover_ms),
            "prefill_failures": [{"reason": r, "action": a, "count": n} for (r, a), n in sorted(log.failures.items())],
        } for pool, log in sorted(self._pools.items())}
