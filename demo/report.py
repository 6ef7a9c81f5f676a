"""The demo's closing report: decision mix, retrains, the verdict on the predictions, demo-summary.json.

Accuracy is judged on the router's own records (prediction at dispatch vs router-measured latency,
``demo.truth``); the client-observed TTFT is reported separately with its parts.
"""

from __future__ import annotations

import importlib.util
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from demo.load import Record
from demo.prom import label_values, metric_value
from demo.truth import PARTS, Joined, accuracy, overhead
from demo.verdict import judgement_text, verdict
from demo.watch import Watcher

_PUBLISHED = re.compile(r"published v(\d+)")
QUANTILE = 0.9


def _router_live(text: str, pool: str) -> dict[str, Any]:
    """The router's drift monitor at the end of the run (time-weighted, recent), per target."""
    return {t: {"coverage": round(metric_value(text, "router_prediction_coverage", pool=pool, pod="all", target=t), 3),
                "mape": round(metric_value(text, "router_prediction_mape", pool=pool, pod="all", target=t), 3),
                "alarm": metric_value(text, "router_drift_alarm", pool=pool, pod="all", target=t) > 0}
            for t in ("ttft", "tpot")}


def build_summary(records: list[Record], watcher: Watcher, metrics_text: str, duration_s: float,
                  settings: dict[str, Any], joined: Sequence[Joined]) -> dict[str, Any]:
    served = [r for r in records if r.status == 200 and not r.error]
    errors = [r for r in records if (r.error and r.status != 429) or (r.status >= 400 and r.status != 429)]
    published: dict[str, set[int]] = {}
    for pool, _, line in watcher.retrains:
        match = _PUBLISHED.search(line)
        if match:
            published.setdefault(pool, set()).add(int(match.group(1)))
    pools = sorted({r.pool for r in served})
    acc = accuracy(joined)
    return {
        "verdict": verdict(acc, QUANTILE),
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
        "bundles_seen": [{"pool": b.pool, "version": b.version, "at_s": round(b.at_s, 1), "prior": b.prior,
                          "probe_ttft_ms": b.probe_ttft_ms, "probe_tpot_ms": b.probe_tpot_ms}
                         for b in watcher.bundles],
        "accuracy": acc,
        "requests_joined": len(joined),
        "client_observed": overhead(joined, watcher.stats.lag.samples_ms),
        "router_live": {pool: _router_live(metrics_text, pool) for pool in pools},
        "fallback_reasons": label_values(metrics_text, "router_prediction_fallbacks_total", "reason"),
        "router_decisions": label_values(metrics_text, "latency_router_proxy_decisions_total", "pod"),
        "duration_s": round(duration_s, 1),
        "settings": settings,
    }


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.0f} %"


def window_text(w: dict[str, Any]) -> str:
    """The lowest coverage of a 10 s window after the first trained bundle (``demo.truth.windowed``), in words."""
    if not w.get("judged"):
        return (f"no {w.get('width_s', 10):g} s window after the first trained bundle with ≥ "
                f"{w.get('min_pairs', 20)} pairs")
    low = w["lowest"]
    return (f"min {w['width_s']:g} s window after the first trained bundle {_pct(w['min_coverage'])} "
            f"({low['pairs']} pairs, from +{w['min_from_s']:g} s; {w['judged']} windows judged)")


def _print_accuracy(summary: dict[str, Any]) -> None:
    print(f"\n=== predicted p{100 * QUANTILE:g} at dispatch vs latency the router measured "
          f"(the quantity predicted) ===")
    judged = summary["verdict"]["judged"]
    for pool, targets in summary["accuracy"].items():
        for t, a in targets.items():
            if not a.get("pairs"):
                print(f"  {pool:<6} {t.upper()}: no pairs")
                continue
            phases = "  ".join(f"{k} {_pct(a[k].get('coverage'))} ({a[k]['pairs']})" for k in ("prior", "trained")
                               if a[k].get("pairs"))
            print(f"  {pool:<6} {t.upper()}: {a['pairs']} pairs  coverage {100 * a['coverage']:.1f} % "
                  f"({judgement_text(judged[pool][t])}; raw model {_pct(a['model'].get('coverage'))})  mean "
                  f"predicted {a['mean_predicted_ms']} ms  mean measured {a['mean_measured_ms']} ms  [{phases}]  "
                  f"{window_text(a.get('windows') or {})}")


def _print_overhead(summary: dict[str, Any]) -> None:
    obs = summary["client_observed"]
    print("\n=== client-observed TTFT (load generator) and where it goes, mean ms ===")
    for pool, o in obs.items():
        if pool == "load_generator_loop_lag":
            continue
        parts = "  ".join(f"{name} {o['parts'][name]['mean_ms']:.1f}" for name in PARTS)
        print(f"  {pool:<6} client TTFT {o['client_ttft']['mean_ms']:.1f} = {parts}")
    lag = obs.get("load_generator_loop_lag") or {}
    if lag:
        print(f"  load generator event-loop lag: mean {lag['mean_ms']:.1f} ms, p90 {lag['p90_ms']:.1f} ms "
              f"(time any event waits before the client handles it)")


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
    _print_accuracy(summary)
    _print_overhead(summary)
    print(f"\n  training samples reported by the router: {summary['samples_reported']}")
    rss = summary.get("peak_rss_mib") or {}
    if rss:
        print("  peak RSS (MiB): " + "  ".join(f"{name} {mib}" for name, mib in sorted(rss.items())))
        if importlib.util.find_spec("sklearn") is not None:
            print("  (dev venv: XGBoost imports the installed dev extras scikit-learn/pandas, ~90 MiB per server; "
                  "the image has none — BENCHMARKS.md measures the servers without them)")
    print(f"\n{summary['verdict']['line']}")
