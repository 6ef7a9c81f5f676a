"""P/D routing benchmark (issue 24 targets): predicted-latency P/D routing against llm-d's stock P/D profile.

Per cell (preset × trace), on one P:D cluster and the trace slice ``--start`` / ``--duration``:

1. **load**: ``pd-load-prefix`` is replayed at rising rate scales (``--rates``, ascending) until its P99 TTFT
   exceeds the cell's TTFT SLO; the highest rate scale that met it is the cell's load;
2. at that load, seed ``--seed``: every variant (``pd-predicted-latency`` and ``pd-predicted-latency-slo``, each
   with the shared and the split trainers) against ``pd-load-prefix``: P99 TTFT ratio (target ≤ 0.5), p50 TTFT
   ratio (≤ 0.85), TPOT p50 within ± 5 %;
3. the CPU time (``time.process_time`` around the replay, unaffected by SIGSTOP pauses) of each P/D replay
   against the aggregated replay of the same trace at the same GPUs (``load-prefix`` / ``predicted-latency`` on
   P + D pods): target ≤ 2×.

    python -m bench.pd.routing --out bench/results/pd/pd-bench.json --plot bench/results/pd/pd-bench.png

Trace: Azure LLM inference trace 2023 (conv, code), Microsoft Azure, CC-BY 4.0.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import results
from bench.common.paths import RESULTS
from bench.pd.report import VARIANTS, cell_targets, markdown_cells, plot_cells
from sim.cluster.config import ClusterConfig, PoolSpec, parse_pd
from sim.engine.config import EngineConfig
from sim.engine.kv_transfer import KVLink
from sim.paths import default_trace
from sim.replay.items import build_items
from sim.replay.outputs import write_requests_csv
from sim.replay.runner import run_policy
from sim.workload.budgets import MaxTokensPolicy
from sim.workload.trace import load_trace

DATA = default_trace().parent
BASELINE = "pd-load-prefix"
MAX_MODEL_LEN = 32768
"""Every prompt of both traces fits (conv's longest is 14k tokens: the presets' 8,192 would shed it)."""
AGGREGATED = ("load-prefix", "predicted-latency")
"""The aggregated replays each P/D replay's CPU time is compared with (``bench.pd.report.CPU_PAIRS``)."""


@dataclass(frozen=True)
class Cell:
    preset: str
    trace: str
    """``conv`` or ``code`` (``azure_llm_2023_<trace>.csv``), or a path."""
    pd: str
    slo_ttft_ms: float
    rates: tuple[float, ...]
    start_s: float = 0.0
    duration_s: float | None = None
    seed: int = 0
    link: KVLink = KVLink()
    options: dict[str, str] = field(default_factory=dict)
    """Options of every predicted variant (``--policy-opt``)."""

    @property
    def name(self) -> str:
        return f"{self.preset}/{Path(self.trace).stem.removeprefix('azure_llm_2023_')}"

    def trace_path(self) -> Path:
        return Path(self.trace) if self.trace.endswith(".csv") else DATA / f"azure_llm_2023_{self.trace}.csv"

    def pods(self) -> tuple[int, int]:
        p, d = (int(x) for x in self.pd.split(":"))
        return p, d

    def cluster(self, aggregated: bool) -> ClusterConfig:
        engine = {"max_model_len": MAX_MODEL_LEN}
        if aggregated:
            return ClusterConfig((PoolSpec("pod", sum(self.pods()), EngineConfig.from_preset(self.preset, **engine)),),
                                 kv_link=self.link)
        return ClusterConfig(parse_pd(self.pd, self.preset, engine), kv_link=self.link)


RATES = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0)
PRESETS = {
    # preset: (P:D, TTFT SLO ms, rate scales tried)
    "llama3-70b-a100-tp4": ("4:2", 2000.0, RATES),
    "llama3-8b-a100": ("4:2", 1000.0, RATES),
}


def replay(cell: Cell, rate: float, policy: str, options: dict[str, str], aggregated: bool = False,
           csv_dir: Path | None = None) -> dict[str, Any]:
    """One replay; its summary (``cpu_s``: CPU time of the replay loop) trimmed to what the bench reports."""
    trace = load_trace(cell.trace_path(), rate, None, cell.duration_s, cell.start_s)
    items = build_items(trace, cell.seed, slo_ttft_ms=cell.slo_ttft_ms, max_tokens=MaxTokensPolicy.parse("fixed:1024"))
    summary, result = run_policy(cell.cluster(aggregated), items, policy, cell.seed, options=options,
                                 slo_ttft_ms=cell.slo_ttft_ms)
    if csv_dir is not None:
        tag = policy + ("" if not options.get("trainers") else f"-{options['trainers']}")
        write_requests_csv(csv_dir / f"{cell.name.replace('/', '-')}-r{rate:g}-{tag}.csv", result.records, policy)
    keep = ("completed", "ttft_ms", "tpot_ms", "cpu_s", "wall_s", "disaggregated_share", "kv_transfer_ms",
            "slo_attainment", "policy_status")
    return {"policy": policy, "options": options, "rate_scale": rate, "requests": len(items),
            **{k: summary[k] for k in keep if k in summary}}


def _ok(summary: dict[str, Any], cell: Cell) -> bool:
    """The SLO: P99 TTFT of the completed requests <= the cell's, nothing shed or lost."""
    p99 = summary["ttft_ms"]["p99"]
    return summary["completed"] == summary["requests"] and p99 is not None and p99 <= cell.slo_ttft_ms


def run_cell(cell: Cell, csv_dir: Path | None = None, log: Any = print) -> dict[str, Any]:
    t0 = time.perf_counter()
    search: list[dict[str, Any]] = []
    load: float | None = None
    for rate in cell.rates:
        s = replay(cell, rate, BASELINE, {})
        ok = _ok(s, cell)
        search.append({"rate_scale": rate, "p99_ttft_ms": s["ttft_ms"]["p99"], "ok": ok, "cpu_s": s["cpu_s"]})
        log(f"[{cell.name}] {BASELINE} x{rate:g}: P99 TTFT {s['ttft_ms']['p99']} ms -> {'ok' if ok else 'miss'}")
        if not ok:
            break
        load = rate
    out: dict[str, Any] = {"cell": cell.name, "preset": cell.preset, "trace": str(cell.trace_path().name),
                           "pd": cell.pd, "slo_ttft_ms": cell.slo_ttft_ms, "start_s": cell.start_s,
                           "duration_s": cell.duration_s, "seed": cell.seed,
                           "link": {"gbps": cell.link.gbps, "latency_ms": cell.link.latency_ms},
                           "load_search": search, "rate_scale": load}
    if load is None:
        out["note"] = f"{BASELINE} misses the SLO at the lowest rate scale tried ({cell.rates[0]})"
        return out
    runs: dict[str, dict[str, Any]] = {}
    for name, policy, extra in VARIANTS:
        opts = {} if policy == BASELINE else {**cell.options, **extra}
        runs[name] = replay(cell, load, policy, opts, csv_dir=csv_dir)
        log(f"[{cell.name}] {name} x{load:g}: TTFT {runs[name]['ttft_ms']}, cpu {runs[name]['cpu_s']} s")
    for agg_policy in AGGREGATED:
        opts = {} if agg_policy == "load-prefix" else dict(cell.options)
        runs[f"aggregated/{agg_policy}"] = replay(cell, load, agg_policy, opts, aggregated=True)
    out["runs"] = runs
    out["targets"] = cell_targets(runs)
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    return out


def default_cells(args: argparse.Namespace) -> list[Cell]:
    cells = []
    opts = dict(p.split("=", 1) for p in args.policy_opt)
    for preset in args.presets.split(","):
        pd, slo, rates = PRESETS[preset]
        for trace in args.traces.split(","):
            chosen = tuple(float(r) for r in args.rates.split(",")) if args.rates else rates
            cells.append(Cell(preset, trace, args.pd or pd, args.slo_ttft_ms or slo, chosen, args.start,
                              args.duration, args.seed, KVLink(args.link_gbps, args.link_latency_ms), opts))
    return cells


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench.pd.routing", description=__doc__.split("\n\n")[0])
    p.add_argument("--presets", default=",".join(PRESETS))
    p.add_argument("--traces", default="conv,code", help="conv, code, or CSV paths")
    p.add_argument("--pd", default=None, help="P:D for every preset (default: per preset)")
    p.add_argument("--slo-ttft-ms", type=float, default=None, help="P99 TTFT SLO (default: per preset)")
    p.add_argument("--rates", default=None, help="rate scales tried, ascending (default: per preset)")
    p.add_argument("--start", type=float, default=0.0)
    p.add_argument("--duration", type=float, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--link-gbps", type=float, default=100.0)
    p.add_argument("--link-latency-ms", type=float, default=1.0)
    p.add_argument("--policy-opt", action="append", default=[], metavar="KEY=VALUE",
                   help="options of every predicted variant")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="cells in parallel")
    p.add_argument("--requests-csv-dir", type=Path, default=None, help="per-request CSV of every variant")
    p.add_argument("--out", type=Path, default=RESULTS / "pd" / "pd-bench.json")
    p.add_argument("--plot", type=Path, default=RESULTS / "pd" / "pd-bench.png")
    return p


def run_cells(cells: Sequence[Cell], jobs: int, csv_dir: Path | None) -> list[dict[str, Any]]:
    if jobs <= 1 or len(cells) == 1:
        return [run_cell(c, csv_dir) for c in cells]
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(run_cell, cells, [csv_dir] * len(cells)))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.requests_csv_dir is not None:
        args.requests_csv_dir.mkdir(parents=True, exist_ok=True)
    with results.run("pd-routing") as recording:
        cells = run_cells(default_cells(args), args.jobs, args.requests_csv_dir)
        setup = {name: value for name, value in vars(args).items() if name not in ("out", "plot")}
        recording.write(args.out, {**setup, "argv": sys.argv[1:] if argv is None else list(argv)},
                        {"cells": cells}, indent=2)
    args.plot.parent.mkdir(parents=True, exist_ok=True)
    plot_cells(args.plot, cells)
    print(markdown_cells(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
