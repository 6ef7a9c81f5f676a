"""Routing on the conv trace in ``sim.replay`` (virtual time): predicted-latency vs round-robin, least-queue and
load-prefix (the llm-d router's default profile without a predictor).

``python -m bench.router.replay [--rate-scale 4] [--pods 4] [--slo-ttft-ms 500] [--limit N]``

Single pool of ``--pods`` pods (round-robin, least-queue, load-prefix, predicted-latency), then the same number of pods
split short/long (``--short-pods``; short pods with a 4k context) under dual-pool, and round-robin /
least-queue / load-prefix on that split cluster for reference. Prints markdown tables (P50/P90/P99 TTFT, SLO
attainment, shed, preemptions per 1k, per-pod share min–max, prediction coverage/MAPE) and writes the
summaries as JSON with ``--out``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import results
from sim.cluster.config import ClusterConfig, PoolSpec
from sim.cluster.registry import default_registry
from sim.engine.config import EngineConfig
from sim.paths import default_trace
from sim.replay.items import build_items
from sim.replay.runner import run_policy
from sim.workload.trace import load_trace

PRESET = "llama3-8b-a100"


def _row(name: str, s: dict[str, Any]) -> str:
    t = s["ttft_ms"]
    shares = list(s["per_pod_share"].values())
    slo = s.get("slo_attainment", {}).get("share")
    err = s.get("prediction_error", {}).get("ttft")
    err_txt = f"{err['coverage']:.2f} / {err['mape']:.2f}" if err else "–"
    return (f"| {name} | {t['p50']:.0f} | {t['p90']:.0f} | {t['p99']:.0f} | "
            f"{(slo if slo is not None else 0) * 100:.1f} % | {s['shed']} | {s['preemptions_per_1k']:.1f} | "
            f"{min(shares):.3f}–{max(shares):.3f} | {err_txt} | {s['wall_s']:.0f} |")


def _by_pool(records: list[Any]) -> dict[str, dict[str, float]]:
    pools: dict[str, list[float]] = {}
    for r in records:
        if r.ttft_ms is not None and r.pool is not None:
            pools.setdefault(r.pool, []).append(r.ttft_ms)
    return {pool: {"p50": float(np.percentile(v, 50)), "p99": float(np.percentile(v, 99)), "n": len(v)}
            for pool, v in sorted(pools.items())}


HEADER = ("| policy | TTFT p50 ms | p90 | p99 | within SLO | shed | preempt/1k | per-pod share min–max "
          "| TTFT pred. coverage / MAPE | wall s |\n|---|--:|--:|--:|--:|--:|--:|---|---|--:|")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rate-scale", type=float, default=4.0)
    p.add_argument("--pods", type=int, default=4)
    p.add_argument("--short-pods", type=int, default=3)
    p.add_argument("--slo-ttft-ms", type=float, default=500.0)
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-gpu-blocks", type=int, default=None, help="KV blocks per pod (default: from memory)")
    p.add_argument("--total-threshold", type=int, default=2048, help="dual-pool: prompt+output above → long")
    p.add_argument("--only", default=None, help="comma-separated subset of runs, e.g. split/dual-pool")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    registry = default_registry()
    trace = load_trace(default_trace(), args.rate_scale, args.limit, None, 0.0)
    items = build_items(trace, args.seed, slo_ttft_ms=args.slo_ttft_ms)
    kv = {"num_gpu_blocks_override": args.num_gpu_blocks} if args.num_gpu_blocks else {}
    single = ClusterConfig(pools=(PoolSpec("pod", args.pods, EngineConfig.from_preset(PRESET, **kv)),))
    split = ClusterConfig(pools=(
        PoolSpec("short", args.short_pods, EngineConfig.from_preset(PRESET, max_model_len=4096, **kv)),
        PoolSpec("long", args.pods - args.short_pods, EngineConfig.from_preset(PRESET, **kv))))
    runs = [("single", single, "round-robin"), ("single", single, "least-queue"),
            ("single", single, "load-prefix"), ("single", single, "predicted-latency"),
            ("split", split, "round-robin"), ("split", split, "least-queue"), ("split", split, "load-prefix"),
            ("split", split, "dual-pool")]
    out: dict[str, Any] = {}
    recording = results.Run("router-replay")
    t0 = time.perf_counter()
    only = set(args.only.split(",")) if args.only else None
    for cluster_name, cfg, policy in runs:
        if only is not None and f"{cluster_name}/{policy}" not in only:
            continue
        opts = {"total_threshold": str(args.total_threshold)} if policy == "dual-pool" else {}
        summary, result = run_policy(cfg, items, policy, args.seed, registry, opts, None, args.slo_ttft_ms)
        summary["ttft_ms_by_pool"] = _by_pool(result.records)
        out[f"{cluster_name}/{policy}"] = summary
    print(f"conv trace, {len(items)} requests, rate ×{args.rate_scale}, TTFT SLO {args.slo_ttft_ms:.0f} ms, "
          f"{args.pods} pods ({PRESET}); split = {args.short_pods} short (4k context) + "
          f"{args.pods - args.short_pods} long, dual-pool total threshold {args.total_threshold}; "
          f"machine: 2 cores; total wall {time.perf_counter() - t0:.0f} s")
    print(HEADER)
    for key, summary in out.items():
        print(_row(key, summary))
    print("\nTTFT by pool (p50 / p99 ms, requests):")
    for key, summary in out.items():
        print(f"- {key}: " + ", ".join(f"{pool} {v['p50']:.0f} / {v['p99']:.0f} ({v['n']})"
                                       for pool, v in summary["ttft_ms_by_pool"].items()))
    print("\nper-pod share:")
    for key, summary in out.items():
        print(f"- {key}: " + ", ".join(f"{k} {v:.3f}" for k, v in summary["per_pod_share"].items()))
    if args.out:
        recording.write(args.out, {k: v for k, v in vars(args).items() if k != "out"}, out, indent=2)


if __name__ == "__main__":
    main()
