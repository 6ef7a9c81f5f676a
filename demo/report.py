"""The demo's closing report: decision mix, retrains, predicted vs actual TTFT, demo-summary.json."""

from __future__ import annotations

import re
import statistics
from collections import Counter
from typing import Any

from demo.load import Record
from demo.prom import histogram_mean, label_values, metric_value
from demo.watch import Watcher

_PUBLISHED = re.compile(r"published v(\d+)")


def _pairs_summary(records: list[Record]) -> dict[str, Any]:
    pairs = [(r.predicted_ttft_ms, r.ttft_ms) for r in records
             if r.predicted_ttft_ms is not None and r.ttft_ms is not None and r.ttft_ms > 0]
    if not pairs:
        return {"pairs": 0}
    half = len(pairs) // 2

    def stats(sub: list[tuple[float, float]]) -> dict[str, float]:
        if not sub:
            return {}
        return {"coverage": round(sum(a <= p for p, a in sub) / len(sub), 3),
                "mape": round(statistics.fmean(abs(p - a) / a for p, a in sub), 3),
                "mean_predicted_ms": round(statistics.fmean(p for p, _ in sub), 1),
                "mean_actual_ms": round(statistics.fmean(a for _, a in sub), 1)}

    return {"pairs": len(pairs), **stats(pairs), "first_half": stats(pairs[:half]),
            "second_half": stats(pairs[half:])}


def _router_side(text: str, pool: str) -> dict[str, Any]:
    """What the router itself measured (dispatch → first token) and its live error, per pool."""
    mean_pred = histogram_mean(text, "inference_objective_request_predicted_ttft_seconds", pool=pool)
    mean_act = histogram_mean(text, "inference_objective_request_ttft_seconds", pool=pool)
    return {"mean_predicted_ms": round(mean_pred * 1000, 1) if mean_pred is not None else None,
            "mean_actual_ms": round(mean_act * 1000, 1) if mean_act is not None else None,
            "live_coverage": round(metric_value(text, "router_prediction_coverage", pool=pool, pod="all",
                                                target="ttft"), 3),
            "live_mape": round(metric_value(text, "router_prediction_mape", pool=pool, pod="all", target="ttft"), 3)}


def build_summary(records: list[Record], watcher: Watcher, metrics_text: str, duration_s: float,
                  settings: dict[str, Any]) -> dict[str, Any]:
    served = [r for r in records if r.status == 200 and not r.error]
    errors = [r for r in records if (r.error and r.status != 429) or (r.status >= 400 and r.status != 429)]
    published: dict[str, set[int]] = {}
    for pool, _, line in watcher.retrains:
        match = _PUBLISHED.search(line)
        if match:
            published.setdefault(pool, set()).add(int(match.group(1)))
    pools = sorted({r.pool for r in served})
    return {
        "requests": len(records),
        "errors": len(errors),
        "error_kinds": dict(Counter(r.error or str(r.status) for r in errors)),
        "shed": sum(1 for r in records if r.status == 429),
        "per_pool": dict(Counter(r.pool for r in served)),
        "per_pod": dict(sorted(Counter(r.pod for r in served).items())),
        "fallback_decisions": sum(1 for r in served if r.fallback),
        "samples_reported": int(metric_value(metrics_text, "router_training_samples_total", outcome="sent")),
        "retrains": sum(len(v) for v in published.values()),
        "retrains_per_pool": {pool: len(v) for pool, v in sorted(published.items())},
        "retrain_log": [f"{pool} @{at:.0f}s: {line}" for pool, at, line in watcher.retrains],
        "bundles_seen": [{"pool": b.pool, "version": b.version, "at_s": round(b.at_s, 1),
                          "probe_ttft_ms": b.probe_ttft_ms, "probe_tpot_ms": b.probe_tpot_ms}
                         for b in watcher.bundles],
        "predicted_vs_actual_ttft": {pool: _pairs_summary([r for r in served if r.pool == pool]) for pool in pools},
        "router_measured_ttft": {pool: _router_side(metrics_text, pool) for pool in pools},
        "fallback_reasons": label_values(metrics_text, "router_prediction_fallbacks_total", "reason"),
        "router_decisions": label_values(metrics_text, "latency_router_proxy_decisions_total", "pod"),
        "duration_s": round(duration_s, 1),
        "settings": settings,
    }


def print_report(summary: dict[str, Any]) -> None:
    print("\n=== decision mix ===")
    total = max(1, sum(summary["per_pool"].values()))
    for pool, n in sorted(summary["per_pool"].items()):
        print(f"  pool {pool:<6} {n:6d} requests ({100 * n / total:4.1f} %)")
    for pod, n in summary["per_pod"].items():
        print(f"    {pod:<28} {n:6d}")
    print(f"  shed (429): {summary['shed']}   errors: {summary['errors']}   "
          f"fallback decisions: {summary['fallback_decisions']}")
    print("\n=== retrains seen ===")
    for line in summary["retrain_log"] or ["  (none)"]:
        print(f"  {line}")
    print(f"  published bundles per pool: {summary['retrains_per_pool']}")
    print("\n=== predicted (p90 model) vs actual TTFT, as the router measured it (dispatch → first token) ===")
    for pool, r in summary["router_measured_ttft"].items():
        print(f"  {pool}: mean predicted {r['mean_predicted_ms']} ms  mean actual {r['mean_actual_ms']} ms  "
              f"live coverage (recent) {100 * r['live_coverage']:.0f} % (target 90 %)  MAPE {r['live_mape']:.2f}")
    print("\n=== predicted vs actual TTFT, client-measured (adds routing + proxy time to the actual) ===")
    for pool, s in summary["predicted_vs_actual_ttft"].items():
        if not s.get("pairs"):
            print(f"  {pool}: no pairs")
            continue
        print(f"  {pool}: {s['pairs']} pairs  mean predicted {s['mean_predicted_ms']} ms  mean actual "
              f"{s['mean_actual_ms']} ms  coverage {100 * s['coverage']:.0f} % (target 90 %)  MAPE {s['mape']:.2f}")
        for half in ("first_half", "second_half"):
            h = s[half]
            if h:
                print(f"      {half.replace('_', ' ')}: coverage {100 * h['coverage']:.0f} %  MAPE {h['mape']:.2f}")
    print(f"\n  training samples reported by the router: {summary['samples_reported']}")
    rss = summary.get("peak_rss_mib") or {}
    if rss:
        print("  peak RSS (MiB): " + "  ".join(f"{name} {mib}" for name, mib in sorted(rss.items())))
