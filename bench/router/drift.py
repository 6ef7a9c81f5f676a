"""Drift and pods that differ (issue 12): predicted-latency vs the heuristics in ``sim.replay`` (virtual time).

``python -m bench.router.drift [--rate-scale 8] [--pods 8] [--slo-ttft-ms 500] [--seeds 0]
[--only drift,nodrift,mixed]``

* **drift**: the conv trace on ``--pods`` ``llama3-8b-a100`` pods; ``pod-0`` becomes 2× slower (step times × 2) at
  the midpoint of the trace. Reported for requests arriving after the switch: P99 TTFT, the first minute's P99,
  and the slowed pod's TTFT coverage (actual ≤ predicted p90) from 60 virtual seconds after the switch on.
* **nodrift**: the same without the scenario (the correction must not cost anything there).
* **mixed**: one pool of 4 × ``llama3-8b-a100`` + 4 × ``llama3-8b-h100`` (same model, the H100 class faster);
  the router fills ``pod_class``; at a load where round-robin degrades.

Policies: ``least-queue``, ``load-prefix`` (the llm-d default profile without a predictor), ``predicted-latency``
(per-pod correction on, the default) and ``predicted-latency`` with ``correction=false``. Same items, same seed.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import results
from sim.cluster.config import ClusterConfig, PodGroupSpec, PoolSpec
from sim.cluster.registry import default_registry
from sim.cluster.simulation import ReplayItem, RequestRecord
from sim.engine.config import EngineConfig
from sim.paths import default_trace
from sim.replay.items import build_items
from sim.replay.runner import run_policy
from sim.scenario import parse_scenario
from sim.workload.trace import load_trace

POLICIES: dict[str, tuple[str, dict[str, str]]] = {
    "least-queue": ("least-queue", {}),
    "load-prefix": ("load-prefix", {}),
    "predicted-latency": ("predicted-latency", {}),
    "predicted-latency/no-correction": ("predicted-latency", {"correction": "false"}),
}
SLOW_POD = "pod-0"


def p99(values: Sequence[float]) -> float:
    return float(np.percentile(values, 99)) if len(values) else float("nan")


def ttfts(records: Sequence[RequestRecord]) -> list[float]:
    return [r.ttft_ms for r in records if r.ttft_ms is not None]


def drift_metrics(records: Sequence[RequestRecord], start: float, switch: float) -> dict[str, Any]:
    done = [r for r in records if r.ttft_ms is not None]
    after = [r for r in done if r.arrival_s >= switch]
    first_minute = ttfts([r for r in after if r.arrival_s < switch + 60.0])
    slow_late = [r for r in after if r.pod_id == SLOW_POD and r.arrival_s >= switch + 60.0]
    covered = [r.ttft_ms <= r.predicted_ttft_ms for r in slow_late
               if r.ttft_ms is not None and r.predicted_ttft_ms is not None]
    before = ttfts([r for r in done if r.arrival_s < switch])
    share = [sum(r.pod_id == SLOW_POD for r in part) / max(len(part), 1)
             for part in ([r for r in done if r.arrival_s < switch], after)]
    return {"p99_before": p99(before), "p99_after": p99(ttfts(after)), "p99_first_minute": p99(first_minute),
            "slow_pod_coverage_from_60s": float(np.mean(covered)) if covered else None,
            "slow_pod_share_before": share[0], "slow_pod_share_after": share[1]}


def overall(records: Sequence[RequestRecord]) -> dict[str, Any]:
    done = [r for r in records if r.ttft_ms is not None]
    per_class: dict[str, list[RequestRecord]] = {}
    for r in done:
        per_class.setdefault(r.pod_class or "", []).append(r)
    return {"p99": p99(ttfts(done)),
            "share_by_class": {k: round(len(v) / len(done), 4) for k, v in per_class.items()},
            "p99_by_class": {k: p99(ttfts(v)) for k, v in per_class.items()}}


def run_all(name: str, cfg: ClusterConfig, items: list[ReplayItem], seed: int, slo: float,
            scenario: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, (policy, opts) in POLICIES.items():
        started = time.perf_counter()
        summary, result = run_policy(cfg, items, policy, seed, default_registry(), opts, None, slo, scenario)
        out[label] = {"records": result.records, "summary": summary, "wall_s": time.perf_counter() - started}
        print(f"  {name} seed {seed} {label}: P99 {summary['ttft_ms']['p99']:.0f} ms "
              f"({out[label]['wall_s']:.0f} s)", flush=True)
    return out


def _pool(pods: int) -> ClusterConfig:
    return ClusterConfig(pools=(PoolSpec("pod", pods, EngineConfig.from_preset("llama3-8b-a100")),))


def _mixed() -> ClusterConfig:
    groups = (PodGroupSpec(4, EngineConfig.from_preset("llama3-8b-a100"), "a100"),
              PodGroupSpec(4, EngineConfig.from_preset("llama3-8b-h100"), "h100"))
    return ClusterConfig(pools=(PoolSpec.mixed("pod", groups),))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rate-scale", type=float, default=8.0)
    p.add_argument("--mixed-rate-scale", type=float, default=11.0)
    p.add_argument("--pods", type=int, default=8)
    p.add_argument("--slo-ttft-ms", type=float, default=500.0)
    p.add_argument("--seeds", default="0")
    p.add_argument("--only", default="drift,nodrift,mixed")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    only = set(args.only.split(","))
    recording = results.Run("router-drift")
    report: dict[str, Any] = {"runs": {}}
    for seed in (int(s) for s in args.seeds.split(",")):
        trace = load_trace(default_trace(), args.rate_scale, None, None, 0.0)
        items = build_items(trace, seed, slo_ttft_ms=args.slo_ttft_ms)
        start, end = items[0].view.arrival_s, items[-1].view.arrival_s
        switch = start + (end - start) / 2
        if "drift" in only:
            scenario = parse_scenario({"events": [{"at_s": switch - start, "pod": SLOW_POD, "speed_factor": 2.0}]})
            runs = run_all("drift", _pool(args.pods), items, seed, args.slo_ttft_ms, scenario)
            report["runs"][f"drift/{seed}"] = {k: {**drift_metrics(v["records"], start, switch),
                                                   "wall_s": v["wall_s"]} for k, v in runs.items()}
        if "nodrift" in only:
            runs = run_all("nodrift", _pool(args.pods), items, seed, args.slo_ttft_ms)
            report["runs"][f"nodrift/{seed}"] = {k: {**overall(v["records"]), "wall_s": v["wall_s"]}
                                                 for k, v in runs.items()}
        if "mixed" in only:
            mixed_items = build_items(load_trace(default_trace(), args.mixed_rate_scale, None, None, 0.0), seed,
                                      slo_ttft_ms=args.slo_ttft_ms)
            runs = run_all("mixed", _mixed(), mixed_items, seed, args.slo_ttft_ms)
            report["runs"][f"mixed/{seed}"] = {k: {**overall(v["records"]), "wall_s": v["wall_s"]}
                                               for k, v in runs.items()}
    print(json.dumps(report["runs"], indent=1, default=float))
    if args.out:
        recording.write(args.out, {k: v for k, v in vars(args).items() if k != "out"}, report, indent=2)


if __name__ == "__main__":
    main()
