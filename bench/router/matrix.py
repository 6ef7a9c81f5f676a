"""The routing matrix (issue 23): every policy on both traces at three loads, with the clairvoyant bound.

``python -m bench.router.matrix --out F.json`` replays conv at 6×, 8×, 10× and code at 2×, 3×, 4× the
recorded rate on 8 ``llama3-8b-a100`` pods (seed 0; TTFT SLO 500 ms conv, 1,000 ms code; client ``max_tokens``
1,024, output lengths hidden) under round-robin, least-queue, load-prefix, prefix-affinity, least-kv,
predicted-latency and clairvoyant, and writes per cell and policy P50/P90/P99 TTFT and TPOT, SLO attainment and
served coverage (share of actual ≤ the prediction served at dispatch), plus per cell the verdicts of the issue's
targets and predicted-latency's share of the clairvoyant's P99 improvement over least-queue. ``--plot F.png``
draws it; the Markdown table is printed (``python -m bench.router.matrix_report F.json`` prints it again).

Subsets: ``--cells conv:8,code:4``, ``--policies least-queue,predicted-latency``, ``--seeds 0,1``; a slice of
each trace with ``--window conv=1200:900`` (trace seconds START:DURATION, repeatable; the full traces span
~3,600 s), or ``--duration S`` (from the start, every trace) / ``--limit N`` for quick runs;
``--requests-csv-dir D`` keeps every run's per-request CSV; ``--policy-module M`` adds the policies M registers;
``--jobs N`` runs (cell, seed) jobs in N processes.
The JSON is rewritten after every finished job, so an interrupted run keeps what it measured.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import results
from bench.router.matrix_report import cell_verdict, plot, table
from sim.cluster.config import ClusterConfig, PoolSpec
from sim.cluster.registry import default_registry
from sim.engine.config import EngineConfig
from sim.paths import shared_data_dir
from sim.replay.items import build_items
from sim.replay.outputs import write_requests_csv
from sim.replay.runner import run_policy
from sim.workload.trace import load_trace

PRESET = "llama3-8b-a100"
TRACES = {"conv": "azure_llm_2023_conv.csv", "code": "azure_llm_2023_code.csv"}
SLO_TTFT_MS = {"conv": 500.0, "code": 1000.0}
CELLS = ("conv:6", "conv:8", "conv:10", "code:2", "code:3", "code:4")
HEURISTICS = ("round-robin", "least-queue", "load-prefix", "prefix-affinity", "least-kv")
POLICIES = (*HEURISTICS, "predicted-latency", "clairvoyant")


@dataclass(frozen=True)
class Cell:
    trace: str
    rate_scale: float

    @property
    def key(self) -> str:
        return f"{self.trace}@{self.rate_scale:g}x"

    @classmethod
    def parse(cls, spec: str) -> Cell:
        trace, sep, scale = spec.partition(":")
        if not sep or trace not in TRACES:
            raise SystemExit(f"--cells: expected TRACE:SCALE with TRACE in {sorted(TRACES)}, got {spec!r}")
        return cls(trace, float(scale))


@dataclass(frozen=True)
class Job:
    cell: Cell
    seed: int
    policies: tuple[str, ...]
    pods: int
    start_s: float
    duration_s: float | None
    limit: int | None
    csv_dir: Path | None


def metrics(summary: dict[str, Any]) -> dict[str, Any]:
    """The matrix's columns out of one ``sim.replay`` summary."""
    err = summary.get("prediction_error")
    q = ("p50", "p90", "p99")
    return {
        "ttft_ms": {k: summary["ttft_ms"][k] for k in q},
        "tpot_ms": {k: summary["tpot_ms"][k] for k in q},
        "slo_attainment": summary.get("slo_attainment", {}).get("share"),
        "served_coverage": None if err is None else {k: err[k]["coverage"] for k in ("ttft", "tpot") if k in err},
        "requests": summary["requests"],
        "completed": summary["completed"],
        "shed": summary["shed"],
        "preemptions_per_1k": summary["preemptions_per_1k"],
        "prefix_hit_fraction_mean": summary["prefix_hit_fraction_mean"],
        "wall_s": summary["wall_s"],
        "cpu_s": summary["cpu_s"],
        **({"policy_status": summary["policy_status"]} if "policy_status" in summary else {}),
    }


def run_job(job: Job) -> tuple[str, int, dict[str, Any]]:
    """Every policy of one (cell, seed) on the same items and cluster."""
    cell = job.cell
    trace = load_trace(shared_data_dir() / TRACES[cell.trace], cell.rate_scale, job.limit, job.duration_s,
                       job.start_s)
    slo = SLO_TTFT_MS[cell.trace]
    items = build_items(trace, job.seed, slo_ttft_ms=slo)
    cfg = ClusterConfig(pools=(PoolSpec("pod", job.pods, EngineConfig.from_preset(PRESET)),))
    out: dict[str, Any] = {"policies": {}, "requests": len(items)}
    for name in job.policies:
        t0 = time.perf_counter()
        summary, result = run_policy(cfg, items, name, job.seed, default_registry(), {}, None, slo)
        out["policies"][name] = metrics(summary)
        if job.csv_dir is not None:
            write_requests_csv(job.csv_dir / f"{cell.trace}-{cell.rate_scale:g}x-seed{job.seed}-{name}.csv",
                               result.records, name)
        print(f"{cell.key} seed {job.seed} {name}: P99 TTFT {summary['ttft_ms']['p99']:.0f} ms, "
              f"{time.perf_counter() - t0:.0f} s wall", file=sys.stderr, flush=True)
    out["verdict"] = cell_verdict(out["policies"], cell.key)
    return cell.key, job.seed, out


def settings(args: argparse.Namespace, cells: Sequence[Cell], policies: Sequence[str]) -> dict[str, Any]:
    return {
        "cells": [c.key for c in cells], "policies": list(policies), "seeds": args.seeds, "pods": args.pods,
        "preset": PRESET, "slo_ttft_ms": SLO_TTFT_MS, "duration_s": args.duration, "limit": args.limit,
        "windows": {t: {"start_s": w[0], "duration_s": w[1]} for t, w in args.windows.items()},
        "max_tokens_policy": "fixed:1024", "output_length": "hidden", "heuristics": list(HEURISTICS),
        "jobs": args.jobs, "policy_modules": list(args.policy_module),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="result JSON")
    p.add_argument("--plot", type=Path, default=None, help="PNG of P99 TTFT and SLO attainment per cell")
    p.add_argument("--cells", default=",".join(CELLS), help="comma-separated TRACE:SCALE (default: %(default)s)")
    p.add_argument("--policies", default=",".join(POLICIES), help="comma-separated (default: all seven)")
    p.add_argument("--seeds", default="0", help="comma-separated seeds (default: 0)")
    p.add_argument("--pods", type=int, default=8)
    p.add_argument("--duration", type=float, default=None, help="trace seconds replayed from the start")
    p.add_argument("--window", action="append", default=[], metavar="TRACE=START:DURATION",
                   help="replay only trace seconds [START, START+DURATION) of TRACE (wins over --duration)")
    p.add_argument("--limit", type=int, default=None, help="first N requests of each trace")
    p.add_argument("--requests-csv-dir", type=Path, default=None)
    p.add_argument("--jobs", type=int, default=1, help="worker processes (one (cell, seed) each)")
    p.add_argument("--policy-module", action="append", default=[],
                   help="import a module that registers more policies (e.g. my_pkg.policies)")
    args = p.parse_args(argv)
    args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    args.windows = {}
    for spec in args.window:
        trace, _, span = spec.partition("=")
        start, _, length = span.partition(":")
        if trace not in TRACES or not start or not length:
            raise SystemExit(f"--window: expected TRACE=START:DURATION with TRACE in {sorted(TRACES)}, got {spec!r}")
        args.windows[trace] = (float(start), float(length))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cells = [Cell.parse(s.strip()) for s in args.cells.split(",") if s.strip()]
    policies = tuple(p.strip() for p in args.policies.split(",") if p.strip())
    for module in args.policy_module:
        default_registry().load_module(module)
    unknown = set(policies) - set(default_registry().names())
    if unknown:
        raise SystemExit(f"--policies: unknown {sorted(unknown)}")
    if args.requests_csv_dir is not None:
        args.requests_csv_dir.mkdir(parents=True, exist_ok=True)
    windows = {c.trace: args.windows.get(c.trace, (0.0, args.duration)) for c in cells}
    jobs = [Job(c, s, policies, args.pods, windows[c.trace][0], windows[c.trace][1], args.limit,
                args.requests_csv_dir) for c in cells for s in args.seeds]
    recording = results.Run("routing-matrix")
    setup = settings(args, cells, policies)
    found: dict[str, Any] = {}
    for cell in cells:
        found[cell.key] = {"trace": cell.trace, "rate_scale": cell.rate_scale, "slo_ttft_ms": SLO_TTFT_MS[cell.trace],
                           "seeds": {}}

    def record(key: str, seed: int, result: dict[str, Any]) -> None:
        found[key]["seeds"][str(seed)] = result
        recording.write(args.out, setup, {"cells": found}, indent=2)

    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            for done in pool.map(run_job, jobs):
                record(*done)
    else:
        for job in jobs:
            record(*run_job(job))
    doc = recording.write(args.out, setup, {"cells": {k: c for k, c in found.items() if c["seeds"]}}, indent=2)
    print(table(results.flat(doc)))
    if args.plot is not None:
        plot(args.plot, results.flat(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
