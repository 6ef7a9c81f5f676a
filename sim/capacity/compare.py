"""``--compare``: the paper's table — single pool worst-case vs aggressive vs dual-pool, each with
round-robin and predicted-latency — as JSON ``{"rows": [...], "settings": {...}, "targets": [...]}``.

Round-robin rows search everything (threshold, TP per pool, pod counts); each predicted-latency row
then searches pod counts at the threshold and TP its round-robin row chose, starting from that
row's counts (a full threshold/TP search per policy would double the time; the hardware choice is
the operator's, the policy only decides where requests go). Rows run in ``jobs`` worker processes; a
predicted-latency row starts as soon as its round-robin row is done.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ProcessPoolExecutor, wait
from typing import Any

from sim.capacity.rows import Settings, narrowed, search_row
from sim.capacity.space import CONFIGS, SearchSpace, sim_policy_for

POLICIES = ("round-robin", "predicted-latency")
BASELINE = "round-robin"


def run_compare(spaces: Mapping[str, SearchSpace], follow_options: Mapping[str, str], settings: Settings, jobs: int,
                quiet: bool, log: Callable[[str], None]) -> dict[str, Any]:
    """``spaces``: per config, its round-robin search space; ``follow_options``: the predicted-latency rows'
    policy options. Returns the whole document."""
    t0 = time.perf_counter()
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    if jobs <= 1:
        for config in CONFIGS:
            base = spaces[config]
            rows[(config, BASELINE)] = search_row(base, settings, quiet)
            nxt = _follow(base, rows[(config, BASELINE)], follow_options)
            rows[(config, "predicted-latency")] = search_row(nxt, settings, quiet)
    else:
        _parallel(spaces, follow_options, settings, jobs, quiet, rows)
    ordered = [rows[(c, p)] for c in CONFIGS for p in POLICIES]
    wall = time.perf_counter() - t0
    log(f"compare: {len(ordered)} rows in {wall:.0f} s")
    return {"rows": ordered, "targets": targets(ordered), "wall_s": round(wall, 1)}


def _follow(base: SearchSpace, row: dict[str, Any], options: Mapping[str, str]) -> SearchSpace:
    policy = "predicted-latency"
    return narrowed(base, row, policy, sim_policy_for(policy, base.family), options)


def _parallel(spaces: Mapping[str, SearchSpace], follow_options: Mapping[str, str], settings: Settings, jobs: int,
              quiet: bool, rows: dict[tuple[str, str], dict[str, Any]]) -> None:
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        running: dict[Future[dict[str, Any]], tuple[str, str]] = {
            pool.submit(search_row, spaces[c], settings, quiet): (c, BASELINE) for c in CONFIGS
        }
        while running:
            done, _ = wait(running, return_when="FIRST_COMPLETED")
            for fut in done:
                config, policy = running.pop(fut)
                rows[(config, policy)] = fut.result()
                if policy == BASELINE:
                    nxt = _follow(spaces[config], rows[(config, policy)], follow_options)
                    running[pool.submit(search_row, nxt, settings, quiet)] = (config, "predicted-latency")


def _row(rows: list[dict[str, Any]], config: str, policy: str) -> dict[str, Any]:
    return next(r for r in rows if r["config"] == config and r["policy"] == policy)


def _check(name: str, value: float, limit: float, op: str) -> dict[str, Any]:
    met = value <= limit if op == "<=" else value >= limit
    return {"target": name, "value": round(value, 4), "limit": round(limit, 4), "op": op, "met": met}


def _preemption_ratio(dual: float, aggressive: float) -> dict[str, Any]:
    name = "dual-pool PL preemptions per 1k / single-aggressive RR's"
    if aggressive > 0:
        return _check(name, dual / aggressive, 0.2, "<=")
    return {"target": name, "value": None, "limit": 0.2, "op": "<=", "met": None,
            "note": f"undefined: single-aggressive round-robin preempted nothing (dual-pool: {dual} per 1k)"}


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's targets, evaluated on the rows (GPU-hours, preemptions, P99 TTFT)."""
    wc_rr = _row(rows, "single-worst-case", BASELINE)
    ag_rr = _row(rows, "single-aggressive", BASELINE)
    ag_pl = _row(rows, "single-aggressive", "predicted-latency")
    dp_pl = _row(rows, "dual-pool", "predicted-latency")
    return [
        _check("dual-pool PL GPU-h / single-worst-case RR GPU-h", dp_pl["gpu_hours"] / wc_rr["gpu_hours"], 0.70, "<="),
        _check("dual-pool PL GPU-h / single-aggressive PL GPU-h", dp_pl["gpu_hours"] / ag_pl["gpu_hours"], 1.0, "<="),
        _check("single-aggressive RR preemptions per 1k", ag_rr["preemptions_per_1k"], 5.0, ">="),
        _preemption_ratio(dp_pl["preemptions_per_1k"], ag_rr["preemptions_per_1k"]),
        _check("dual-pool PL P99 TTFT / single-aggressive RR P99 TTFT",
               (dp_pl["p99_ttft_ms"] or float("inf")) / (ag_rr["p99_ttft_ms"] or float("inf")), 1.0, "<="),
        _check("single-aggressive PL GPU-h / single-aggressive RR GPU-h", ag_pl["gpu_hours"] / ag_rr["gpu_hours"],
               0.75, "<="),
    ]
