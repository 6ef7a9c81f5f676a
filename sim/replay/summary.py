"""Summary statistics of a replay run and their text table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from sim.cluster.simulation import ReplayResult, RequestRecord


def _pcts(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p90": 0.0, "p99": 0.0, "mean": 0.0}
    arr = np.asarray(values, dtype=np.float64)
    p50, p90, p99 = np.percentile(arr, [50, 90, 99])
    return {"p50": round(float(p50), 3), "p90": round(float(p90), 3), "p99": round(float(p99), 3),
            "mean": round(float(arr.mean()), 3)}


def _prediction_error(done: list[RequestRecord], actual: str, predicted: str) -> dict[str, float] | None:
    pairs = [(getattr(r, actual), getattr(r, predicted)) for r in done if getattr(r, predicted) is not None]
    if not pairs:
        return None
    a = np.array([p[0] for p in pairs], dtype=np.float64)
    p = np.array([p[1] for p in pairs], dtype=np.float64)
    mask = a > 0
    mape = float(np.mean(np.abs(p[mask] - a[mask]) / a[mask])) if mask.any() else 0.0
    return {
        "n": len(pairs),
        "coverage": round(float(np.mean(a <= p)), 4),
        "mape": round(mape, 4),
    }


def summarize(
    result: ReplayResult, policy: str, wall_s: float, slo_ttft_ms: float | None = None
) -> dict[str, Any]:
    recs = result.records
    done = [r for r in recs if r.ttft_ms is not None]
    shed = [r for r in recs if r.shed_reason is not None]
    aborted = sum(1 for r in recs if r.aborted is not None)
    ttft = [r.ttft_ms for r in done if r.ttft_ms is not None]
    tpot = [r.tpot_ms for r in done if r.tpot_ms is not None and r.output_tokens > 1]
    preempt = sum(p.preemptions for p in result.pods)
    routed = sum(p.requests for p in result.pods) or 1
    out: dict[str, Any] = {
        "policy": policy,
        "requests": len(recs),
        "completed": len(done),
        "shed": len(shed),
        "aborted": aborted,
        "ttft_ms": _pcts(ttft),
        "tpot_ms": _pcts(tpot),
        "e2e_ms": _pcts([r.e2e_ms for r in done if r.e2e_ms is not None]),
        "preemptions": preempt,
        "preemptions_per_1k": round(1000.0 * preempt / max(len(done), 1), 3),
        "prefix_hit_fraction_mean": round(float(np.mean([r.prefix_hit_fraction or 0.0 for r in done])), 4)
        if done else 0.0,
        "gpu_busy_s": round(sum(p.busy_s for p in result.pods), 3),
        "sim_span_s": round(result.span_s, 3),
        "throughput_rps": round(len(done) / result.span_s, 3) if result.span_s > 0 else 0.0,
        "utilisation": round(sum(p.busy_s for p in result.pods) / (result.span_s * len(result.pods)), 4)
        if result.pods else 0.0,
        "per_pod_share": {p.pod_id: round(p.requests / routed, 4) for p in result.pods},
        "per_pod": {
            p.pod_id: {
                "pool": p.pool, "pod_class": p.pod_class, "requests": p.requests, "busy_s": round(p.busy_s, 3),
                "kv_usage_mean": round(p.mean_kv_usage, 4), "kv_usage_max": round(p.max_kv_usage, 4),
                "preemptions": p.preemptions, "prefix_hit_rate": round(p.prefix_hit_rate, 4),
                "steps": p.steps,
                **({} if p.events is None else {"events": p.events}),
            }
            for p in result.pods
        },
        "shed_reasons": _count([r.shed_reason for r in shed if r.shed_reason]),
        "wall_s": round(wall_s, 3),
    }
    if slo_ttft_ms is not None:
        ok = sum(1 for r in done if r.ttft_ms is not None and r.ttft_ms <= slo_ttft_ms)
        out["slo_attainment"] = {"ttft_ms": slo_ttft_ms, "share": round(ok / max(len(recs), 1), 4)}
    out.update(_disaggregation(recs))
    errors = {k: _prediction_error(done, f"{k}_ms", f"predicted_{k}_ms") for k in ("ttft", "tpot")}
    if any(v is not None for v in errors.values()):
        out["prediction_error"] = {k: v for k, v in errors.items() if v is not None}
    return out


def _disaggregation(recs: Sequence[RequestRecord]) -> dict[str, Any]:
    """P/D clusters only: ``disaggregated_share`` of the routed requests, ``kv_transfer_ms`` and
    ``kv_block_wait_ms`` {p50, p99} over the completed disaggregated ones."""
    routed = [r for r in recs if r.disaggregated is not None]
    if not routed:
        return {}
    split = [r for r in routed if r.disaggregated and r.ttft_ms is not None]
    out: dict[str, Any] = {"disaggregated_share": round(sum(1 for r in routed if r.disaggregated) / len(routed), 4)}
    for key in ("kv_transfer_ms", "kv_block_wait_ms"):
        pcts = _pcts([v for r in split if (v := getattr(r, key)) is not None])
        out[key] = {"p50": pcts["p50"], "p99": pcts["p99"]}
    return out


def _count(values: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def format_table(summaries: Sequence[dict[str, Any]]) -> str:
    head = (f"{'policy':<22}{'reqs':>7}{'shed':>6}{'ttft p50':>10}{'p90':>9}{'p99':>9}"
            f"{'tpot p50':>10}{'p90':>8}{'p99':>8}{'pre/1k':>8}{'busy':>7}{'hit':>7}{'wall s':>8}")
    lines = [head, "-" * len(head)]
    for s in summaries:
        t, p = s["ttft_ms"], s["tpot_ms"]
        oracle = s.get("request_budget", {}).get("output_length") == "oracle"
        label = s["policy"] + (" [oracle]" if oracle else "")
        lines.append(
            f"{label:<22}{s['requests']:>7}{s['shed']:>6}{t['p50']:>10.0f}{t['p90']:>9.0f}{t['p99']:>9.0f}"
            f"{p['p50']:>10.1f}{p['p90']:>8.1f}{p['p99']:>8.1f}{s['preemptions_per_1k']:>8.1f}"
            f"{s['utilisation']:>7.2f}{s['prefix_hit_fraction_mean']:>7.2f}{s['wall_s']:>8.1f}"
        )
    return "\n".join(lines)
