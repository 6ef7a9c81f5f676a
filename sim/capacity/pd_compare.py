"""``--pd-compare``: aggregated vs prefill/decode-disaggregated serving at equal GPUs on one trace.

The document: ``aggregated`` and ``pd`` (the fewest-GPU answer of each, or None when nothing up to
``--max-pods`` passes), ``winner`` (``pd`` / ``aggregated`` / ``tie`` on GPUs; ``none`` if neither passes),
``gpu_ratio`` (P/D GPUs ÷ aggregated GPUs) and ``trials`` (every replay measured, for the plot).
"""

from __future__ import annotations

import time
from typing import Any

from sim.capacity.joint import JointSlo
from sim.capacity.pd_search import Log, PdCapacitySearch
from sim.capacity.pd_space import PdSpace
from sim.capacity.workload import Window


def run_pd_compare(space: PdSpace, window: Window, slo: JointSlo, seed: int, log: Log,
                   max_trials: int = 60) -> dict[str, Any]:
    t0 = time.perf_counter()
    search = PdCapacitySearch(space, window, slo, seed, log, max_trials)
    agg = search.aggregated()
    pd = search.disaggregated(sum(agg.pods) if agg is not None else 2)
    if agg is not None and pd is not None:
        ratio: float | None = round(pd.gpus / agg.gpus, 4)
        winner = "pd" if pd.gpus < agg.gpus else "aggregated" if pd.gpus > agg.gpus else "tie"
    else:
        ratio = None
        winner = "none" if agg is None and pd is None else "pd" if agg is None else "aggregated"
    return {
        "aggregated": None if agg is None else agg.as_dict(), "pd": None if pd is None else pd.as_dict(),
        "winner": winner, "gpu_ratio": ratio, "slo": slo.as_dict(),
        "space": {"preset": space.preset, "tensor_parallel_size": space.gpus_per_pod, "policy": space.policy,
                  "pd_policy": space.pd_policy, "link_gbps": space.link.gbps, "link_latency_ms": space.link.latency_ms,
                  "max_pods": space.max_pods},
        "trials": search.curve(), "wall_s": round(time.perf_counter() - t0, 1),
    }


def format_pd_compare(doc: dict[str, Any]) -> str:
    lines = [f"{'config':<12}{'pods':<10}{'GPUs':>6}{'P99 TTFT':>10}{'P99 TPOT':>10}{'p50 TTFT':>10}{'p50 TPOT':>10}"]
    for name in ("aggregated", "pd"):
        row = doc[name]
        if row is None:
            lines.append(f"{name:<12}{'-':<10}{'none within --max-pods':>30}")
            continue
        lines.append(f"{name:<12}{row['label']:<10}{row['gpus']:>6}{_f(row['p99_ttft_ms']):>10}"
                     f"{_f(row['p99_tpot_ms'], 1):>10}{_f(row['p50_ttft_ms']):>10}{_f(row['p50_tpot_ms'], 1):>10}")
    lines.append(f"winner: {doc['winner']} (P/D GPUs / aggregated GPUs: {doc['gpu_ratio']})")
    return "\n".join(lines)


def _f(v: float | None, digits: int = 0) -> str:
    return "inf" if v is None else f"{v:.{digits}f}"
