"""One policy's results from the load generator's records and the router's (``GET /ui/requests``).

* ``ttft_ms`` / ``tpot_ms``: the load generator's (request sent → first content chunk; (end − first) /
  (chunks − 1)) over the requests that succeeded; ``router_ttft_ms`` / ``router_tpot_ms`` the router-measured
  ones (upstream request sent → first chunk) of the same run.
* ``slo_attainment``: share of *all* sent requests with a client TTFT ≤ the SLO — errors and sheds are misses.
* ``served_coverage``: share of the router's records with a prediction at dispatch whose router-measured
  latency ≤ that (p90, acted-on) prediction; null when the policy made no predicted decision. ``…_after_s``:
  the same over requests dispatched at least that long after the run's first dispatch.
* ``throughput_rps``: successful requests / (last response end − first request sent).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from bench.real_engine.load import tpot_ms
from demo.load import Record

QUANTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0}
TARGETS = ("ttft", "tpot")


def percentiles(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return dict.fromkeys(QUANTILES)
    arr = np.asarray(values, dtype=np.float64)
    return {k: round(float(np.percentile(arr, q)), 1) for k, q in QUANTILES.items()}


def ok(rec: Record) -> bool:
    return rec.status == 200 and not rec.error and rec.ttft_ms is not None


def slo_attainment(records: Sequence[Record], slo_ttft_ms: float | None) -> float | None:
    if slo_ttft_ms is None or not records:
        return None
    met = sum(1 for r in records if ok(r) and r.ttft_ms is not None and r.ttft_ms <= slo_ttft_ms)
    return round(met / len(records), 4)


def served_coverage(routed: Sequence[Mapping[str, Any]], after_s: float = 0.0) -> dict[str, float | None]:
    """Per target: covered / pairs over records with both a prediction and a measurement (None: no pairs)."""
    t0 = min((float(r["dispatched_at"]) for r in routed), default=0.0)
    late = [r for r in routed if float(r["dispatched_at"]) - t0 >= after_s and not r.get("error")]
    out: dict[str, float | None] = {}
    for target in TARGETS:
        pairs = [(r[f"predicted_{target}_ms"], r[f"{target}_ms"]) for r in late
                 if r.get(f"predicted_{target}_ms") is not None and r.get(f"{target}_ms") is not None]
        out[target] = round(sum(a <= p for p, a in pairs) / len(pairs), 4) if pairs else None
    out["pairs"] = sum(1 for r in late if r.get("predicted_ttft_ms") is not None)
    return out


def throughput(records: Sequence[Record]) -> float | None:
    done = [r for r in records if ok(r)]
    if not done:
        return None
    start = min(r.sent_at for r in records)
    end = max(r.sent_at + (r.e2e_ms or 0.0) / 1e3 for r in done)
    return round(len(done) / (end - start), 4) if end > start else None


def summarise(records: Sequence[Record], routed: Sequence[Mapping[str, Any]], slo_ttft_ms: float | None,
              coverage_after_s: float) -> dict[str, Any]:
    good = [r for r in records if ok(r)]
    shed = sum(1 for r in records if r.status == 429)
    errors = Counter(r.error or f"status_{r.status}" for r in records if not ok(r) and r.status != 429)
    router_ok = [r for r in routed if not r.get("error")]
    return {
        "requests": len(records),
        "errors": sum(errors.values()),
        "error_kinds": dict(errors),
        "shed": shed,
        "ttft_ms": percentiles([r.ttft_ms for r in good if r.ttft_ms is not None]),
        "tpot_ms": percentiles([t for t in map(tpot_ms, good) if t is not None]),
        "router_ttft_ms": percentiles([float(r["ttft_ms"]) for r in router_ok if r.get("ttft_ms") is not None]),
        "router_tpot_ms": percentiles([float(r["tpot_ms"]) for r in router_ok
                                       if r.get("tpot_ms") is not None and r.get("output_tokens", 0) >= 2]),
        "slo_attainment": slo_attainment(records, slo_ttft_ms),
        "served_coverage": _coverage_or_null(served_coverage(routed)),
        f"served_coverage_after_{coverage_after_s:g}s": _coverage_or_null(served_coverage(routed, coverage_after_s)),
        "throughput_rps": throughput(records),
        "fallback_decisions": sum(1 for r in routed if r.get("fallback")),
        "pod_share": _shares(good),
    }


def _coverage_or_null(cov: dict[str, float | None]) -> dict[str, float | None] | None:
    return None if not cov.get("pairs") else cov


def _shares(records: Sequence[Record]) -> dict[str, float]:
    counts = Counter(r.pod for r in records)
    total = sum(counts.values())
    return {pod: round(n / total, 3) for pod, n in sorted(counts.items())} if total else {}
