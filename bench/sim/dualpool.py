"""Dual-pool benchmark (issue 14): the paper's table from ``sim.capacity --compare`` plus the measurements
that explain it (KV use, sensitivity of the configuration choices, threshold tuning, autoscaling).

    python -m bench.sim.dualpool                       # all parts, markdown on stdout
    python -m bench.sim.dualpool --only compare,kv     # some parts

Writes ``bench/results/sim/dualpool.json`` (``--out``; parts not run are kept from the file) and the plot
``bench/results/sim/dualpool_compare.png`` (``--plot``; the copy BENCHMARKS.md embeds is
``docs/dualpool_compare.png``). The detail file is ``bench/results/sim/RESULTS-dualpool.md``.
Trace: Azure LLM inference trace 2023 (conv), Microsoft Azure, CC-BY 4.0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import results
from bench.common.paths import OUT, REPO, RESULTS
from sim.capacity.rows import Settings, elastic_replay, search_row, workload_of
from sim.capacity.space import SearchSpace, Threshold, file_space, preset_space
from sim.cluster.autoscale import AutoscaleConfig
from sim.cluster.config import ClusterConfig, PoolSpec
from sim.engine.config import EngineConfig
from sim.paths import default_trace
from sim.replay.runner import run_policy

DEFAULT_OUT = RESULTS / "sim" / "dualpool.json"
DEFAULT_PLOT = RESULTS / "sim" / "dualpool_compare.png"
PRESET = "llama3-70b-a100-tp4"
LONG = 32768
PARTS = ("compare", "kv", "sensitivity", "tuning", "elastic")


def _load() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def _quiet(_: str) -> None:
    return None


def compare(plot: Path) -> dict[str, Any]:
    """The pinned command, timed as a subprocess (what a user runs)."""
    out = OUT / "capacity_compare.json"
    before = _load()
    t0, c0 = time.perf_counter(), os.times()
    subprocess.run([sys.executable, "-m", "sim.capacity", "--compare", "--out", str(out), "--plot", str(plot),
                    "--quiet"], check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    c1 = os.times()
    doc = json.loads(out.read_text())
    doc["bench"] = {"wall_s": round(time.perf_counter() - t0, 1), "load_before": before, "load_after": _load(),
                    "cpu_s_children": round(c1.children_user + c1.children_system - c0.children_user
                                            - c0.children_system, 1)}
    return doc


def _engine(rule: str, ctx: int, tp: int = 4) -> EngineConfig:
    return EngineConfig.from_preset(PRESET, max_model_len=ctx, provisioning=rule, tensor_parallel_size=tp)


def kv(rows: list[dict[str, Any]], settings: Settings) -> list[dict[str, Any]]:
    """KV use and preemptions of the single-aggressive answers, and of the same pool far overloaded."""
    items = workload_of(settings).full.items
    out = []
    cases = [(f"single-aggressive {r['policy']} answer", r["policy"], r["pools"][0]["pods"],
              r["pools"][0]["tensor_parallel_size"]) for r in rows if r["config"] == "single-aggressive"]
    cases.append(("single-aggressive, half the round-robin answer (overload)", "round-robin",
                  max(1, cases[0][2] // 2), cases[0][3]))
    for label, policy, pods, tp in cases:
        cfg = ClusterConfig(pools=(PoolSpec("pod", pods, _engine("aggressive", LONG, tp)),))
        summary, _ = run_policy(cfg, items, policy, slo_ttft_ms=settings.slo.ttft_ms)
        per = summary["per_pod"].values()
        out.append({"case": label, "pods": pods, "tp": tp, "kv_usage_max": max(p["kv_usage_max"] for p in per),
                    "kv_usage_mean": round(sum(p["kv_usage_mean"] for p in per) / len(per), 4),
                    "preemptions": summary["preemptions"], "ttft_p99_ms": summary["ttft_ms"]["p99"],
                    "kv_tokens_per_pod": _engine("aggressive", LONG, tp).kv_tokens})
    return out


def _dual_file(short_rule: str, long_rule: str, short_ctx: int = 4096) -> SearchSpace:
    pools = (PoolSpec("short", 5, _engine(short_rule, short_ctx)), PoolSpec("long", 6, _engine(long_rule, LONG)))
    return file_space(pools, "round-robin", (None,), {}, 64)


def sensitivity(settings: Settings) -> list[dict[str, Any]]:
    """Round-robin searches with one choice of the table changed at a time."""
    cases: list[tuple[str, SearchSpace]] = [
        ("TP 4 only: single-worst-case", preset_space("single-worst-case", "round-robin", PRESET, LONG, (4096,),
                                                      (None,), (4,), {}, 64)),
        ("TP 4 only: single-aggressive", preset_space("single-aggressive", "round-robin", PRESET, LONG, (4096,),
                                                      (None,), (4,), {}, 64)),
        ("TP 4 only: dual-pool", preset_space("dual-pool", "round-robin", PRESET, LONG, (4096, 8192), (None,),
                                              (4,), {}, 64)),
        ("dual-pool, short context 6144", preset_space("dual-pool", "round-robin", PRESET, LONG, (6144,), (None,),
                                                       (4, 8), {}, 64)),
        ("dual-pool, short 4096 worst-case + long aggressive", _dual_file("worst-case", "aggressive")),
        ("dual-pool, short 4096 aggressive + long aggressive", _dual_file("aggressive", "aggressive")),
    ]
    out = []
    for label, space in cases:
        row = search_row(space, settings, quiet=True)
        out.append({"case": label, **{k: row[k] for k in ("gpus", "gpu_hours", "p99_ttft_ms", "attainment",
                                                          "preemptions_per_1k")},
                    "pools": [(p["name"], p["pods"], p["tensor_parallel_size"], p["max_model_len"], p["max_num_seqs"],
                               p["provisioning"]) for p in row["pools"]], "wall_s": row["search"]["wall_s"]})
    return out


def tuning(rows: list[dict[str, Any]], settings: Settings) -> list[dict[str, Any]]:
    """The dual-pool answer replayed with the router's default threshold (2,048 total tokens), with and
    without the pool tuner, and with the threshold the search chose (context rule only)."""
    items = workload_of(settings).full.items
    out = []
    for row in (r for r in rows if r["config"] == "dual-pool"):
        pools = tuple(PoolSpec(p["name"], p["pods"], _engine(p["provisioning"], p["max_model_len"],
                                                             p["tensor_parallel_size"])) for p in row["pools"])
        policy = "dual-pool" if row["policy"] == "predicted-latency" else "dual-pool-round-robin"
        for label, opts in (("threshold 2048 (router default)", {}),
                            ("threshold 2048 + tuning (every 60 s)", {"tuning": "true"}),
                            ("threshold 2048 + tuning every 15 s", {"tuning": "true", "tuning_interval_s": "15"}),
                            ("context rule only (the search's choice)", {"total_threshold": "none"})):
            summary, result = run_policy(ClusterConfig(pools=pools), items, policy, options=opts,
                                         slo_ttft_ms=settings.slo.ttft_ms)
            long_share = sum(r.pool == "long" for r in result.records) / len(result.records)
            tuned = summary.get("policy_status", {}).get("tuning")
            out.append({"policy": row["policy"], "case": label, "ttft_p99_ms": summary["ttft_ms"]["p99"],
                        "attainment": summary["slo_attainment"]["share"], "long_share": round(long_share, 4),
                        "final_threshold": tuned["threshold_tokens"] if tuned else None,
                        "last_recommendation": tuned["last"] if tuned else None})
    return out


def elastic(rows: list[dict[str, Any]], settings: Settings) -> list[dict[str, Any]]:
    """Every answer replayed with a KEDA-like scaler per pool: HPA defaults, and a faster variant."""
    workload = workload_of(settings)
    variants = {"KEDA/HPA defaults": AutoscaleConfig(),
                "fast (poll 15 s, start-up 60 s, scale-down window 60 s, floor = half the smaller pool)": None}
    out = []
    for row in rows:
        space = preset_space(row["config"], row["policy"], PRESET, LONG, (4096,), (None,), (4, 8), {}, 64)
        th = row.get("threshold") or {"short_max_model_len": None, "total_threshold_tokens": None}
        threshold = Threshold(th["short_max_model_len"], th["total_threshold_tokens"])
        counts = tuple((p["tensor_parallel_size"], p["pods"]) for p in row["pools"])
        for label, cfg in variants.items():
            scaler = cfg or AutoscaleConfig(poll_interval_s=15.0, startup_s=60.0, scale_down_stabilization_s=60.0,
                                            min_pods=max(1, min(n for _, n in counts) // 2))
            res = elastic_replay(space, threshold, counts, workload, settings, scaler, _quiet)
            out.append({"config": row["config"], "policy": row["policy"], "variant": label,
                        "static_gpu_hours": row["gpu_hours"], "elastic_gpu_hours": res["gpu_hours"],
                        "p99_ttft_ms": res["p99_ttft_ms"], "attainment": res["attainment"],
                        "peak_pods": {k: v["peak_pods"] for k, v in res["pools"].items()}})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", default=",".join(PARTS))
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="result JSON (default: %(default)s)")
    ap.add_argument("--plot", type=Path, default=DEFAULT_PLOT, help="compare part's plot (default: %(default)s)")
    args = ap.parse_args()
    parts = [p for p in args.only.split(",") if p]
    for directory in (OUT, args.out.parent, args.plot.parent):
        directory.mkdir(parents=True, exist_ok=True)
    settings = Settings(default_trace())
    path = args.out
    recording = results.Run("dualpool")
    doc: dict[str, Any] = dict(results.figures(results.read(path))) if path.exists() else {}
    setup = {"parts": parts, "kept_from_file": sorted(set(doc) - set(parts)), "preset": PRESET, "long_context": LONG,
             "trace": str(settings.trace), "plot": args.plot}
    if "compare" in parts:
        doc["compare"] = compare(args.plot)
    rows = doc["compare"]["rows"]
    steps = {"kv": lambda: kv(rows, settings), "sensitivity": lambda: sensitivity(settings),
             "tuning": lambda: tuning(rows, settings), "elastic": lambda: elastic(rows, settings)}
    for part in parts:
        if part in steps:
            t0 = time.perf_counter()
            doc[part] = {"load_before": _load(), "results": steps[part]()}
            doc[part]["wall_s"] = round(time.perf_counter() - t0, 1)
        recording.write(path, setup, doc, indent=2)
    print(json.dumps({k: v for k, v in doc.items() if k != "compare"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
