"""A search result as a table row (JSON) and as text."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from sim.capacity.search import SearchResult
from sim.capacity.slo import Verdict
from sim.capacity.space import DUAL
from sim.capacity.trial import TrialResult


def _completed(trial: TrialResult) -> int:
    return sum(int(np.count_nonzero(~np.isnan(p.ttft_ms))) for p in trial.points.values())


def _preemptions_per_1k(trial: TrialResult) -> float:
    return round(1000.0 * sum(p.preemptions for p in trial.points.values()) / max(_completed(trial), 1), 3)


def _p99(values: np.ndarray) -> float | None:
    done = values[~np.isnan(values)]
    return round(float(np.percentile(done, 99)), 1) if len(done) else None


def _pools(result: SearchResult) -> list[dict[str, Any]]:
    trial = result.confirm
    space = result.space
    out = []
    for i, (shape, (tp, n)) in enumerate(zip(space.pools, trial.counts, strict=True)):
        eng = space.engine_of(i, trial.threshold, tp)
        point = trial.points[shape.name]
        out.append({
            "name": shape.name, "pods": n, "tensor_parallel_size": tp, "gpus": n * tp,
            "max_model_len": eng.max_model_len, "max_num_seqs": eng.max_num_seqs,
            "max_num_batched_tokens": eng.max_num_batched_tokens, "provisioning": eng.provisioning,
            "kv_tokens_per_pod": eng.kv_tokens, "requests": len(point.ttft_ms),
            "p99_ttft_ms": _p99(point.ttft_ms), "preemptions": point.preemptions,
        })
    return out


def _verdict(v: Verdict) -> dict[str, Any]:
    p99 = v.p99_ttft_ms if math.isfinite(v.p99_ttft_ms) else None
    return {"p99_ttft_ms": None if p99 is None else round(p99, 1), "attainment": round(v.attainment, 5)}


def result_row(result: SearchResult, wall_s: float) -> dict[str, Any]:
    trial = result.confirm
    space = result.space
    row: dict[str, Any] = {
        "config": space.config, "policy": space.policy, "sim_policy": space.sim_policy,
        "gpus": trial.gpus, "gpu_hours": round(trial.gpus * trial.span_s / 3600.0, 4),
        **_verdict(trial.verdict), "preemptions_per_1k": _preemptions_per_1k(trial), "slo_met": trial.verdict.ok,
        "span_s": round(trial.span_s, 1), "pools": _pools(result),
    }
    if space.family == DUAL:
        row["threshold"] = trial.threshold.as_dict()
    if result.coarse is not None:
        c = result.coarse
        row["coarse"] = {"gpus": c.gpus, "counts": [{"tp": tp, "pods": n} for tp, n in c.counts],
                         "threshold": c.threshold.as_dict(), **_verdict(c.verdict)}
    row["search"] = {"trials": len(result.trials), "wall_s": round(wall_s, 1), "log": result.trials}
    return row


def elastic_row(trial: TrialResult) -> dict[str, Any]:
    """The autoscaled replay of a row's configuration."""
    raw = trial.extra.get("controller", {})
    pools = {name: {k: v for k, v in p.items() if k != "events"} for name, p in raw.items()} \
        if isinstance(raw, dict) else {}
    gpu_hours = sum(float(p["gpu_hours"]) for p in pools.values())
    return {"gpu_hours": round(gpu_hours, 3), **_verdict(trial.verdict), "slo_met": trial.verdict.ok,
            "preemptions_per_1k": _preemptions_per_1k(trial), "pools": pools}


def format_rows(rows: Sequence[dict[str, Any]]) -> str:
    head = (f"{'config':<19}{'policy':<19}{'GPUs':>6}{'GPU-h':>8}{'P99 TTFT':>10}{'attain':>9}{'pre/1k':>8}"
            f"{'elastic GPU-h':>15}  pools")
    lines = [head, "-" * (len(head) + 30)]
    for r in rows:
        pools = " + ".join(f"{p['name']} {p['pods']}xTP{p['tensor_parallel_size']} ({p['max_model_len']}, "
                           f"{p['max_num_seqs']} seqs)" for p in r["pools"])
        elastic = r.get("elastic", {}).get("gpu_hours")
        p99 = r["p99_ttft_ms"]
        lines.append(f"{r['config']:<19}{r['policy']:<19}{r['gpus']:>6}{r['gpu_hours']:>8.2f}"
                     f"{(f'{p99:.0f}' if p99 is not None else 'inf'):>10}{r['attainment']:>9.4f}"
                     f"{r['preemptions_per_1k']:>8.2f}{(f'{elastic:.2f}' if elastic is not None else '-'):>15}"
                     f"  {pools}")
    return "\n".join(lines)
