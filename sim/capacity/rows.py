"""One row of the table: load the workload, search, optionally replay the answer with the autoscaler.

:func:`search_row` is a plain function of picklable arguments so ``--compare`` can run rows in worker
processes; progress goes to stderr, one line per trial, prefixed with the row's label.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from sim.capacity.report import elastic_row, result_row
from sim.capacity.search import CapacitySearch, SearchResult
from sim.capacity.slo import Slo
from sim.capacity.space import SearchSpace, Threshold
from sim.capacity.trial import TrialRunner
from sim.capacity.workload import Workload, load_workload
from sim.cluster.autoscale import AutoscaleConfig, Autoscaler
from sim.workload.budgets import MaxTokensPolicy

ELASTIC_MAX_FACTOR = 1.5
"""An elastic pool may grow to this multiple of its static size (rounded up)."""


@dataclass(frozen=True)
class Settings:
    trace: Path
    rate_scale: float = 4.0
    seed: int = 0
    slo: Slo = Slo()
    max_tokens_policy: str = "fixed:1024"
    coarse_fraction: float = 0.2
    warmup_fraction: float = 0.05
    limit: int | None = None
    max_trials: int = 60
    autoscale: AutoscaleConfig | None = None
    start_s: float = 0.0
    duration_s: float | None = None


@lru_cache(maxsize=2)
def workload_of(settings: Settings) -> Workload:
    return load_workload(settings.trace, settings.rate_scale, settings.seed, settings.slo.ttft_ms,
                         MaxTokensPolicy.parse(settings.max_tokens_policy), settings.coarse_fraction,
                         settings.warmup_fraction, settings.limit, settings.start_s, settings.duration_s)


def _logger(label: str, quiet: bool) -> Any:
    def log(line: str) -> None:
        if not quiet:
            print(f"[{label}] {line}", file=sys.stderr, flush=True)
    return log


def search_row(space: SearchSpace, settings: Settings, quiet: bool = False) -> dict[str, Any]:
    """Search ``space``; the row (with ``elastic`` when ``settings.autoscale`` is set)."""
    label = f"{space.config}/{space.policy}"
    log = _logger(label, quiet)
    t0 = time.perf_counter()
    workload = workload_of(settings)
    result = CapacitySearch(space, workload, settings.slo, settings.seed, log, settings.max_trials).run()
    row = result_row(result, time.perf_counter() - t0)
    if settings.autoscale is not None:
        row["elastic"] = _elastic(result, workload, settings, log)
    row["search"]["wall_s"] = round(time.perf_counter() - t0, 1)
    log(f"done: {row['gpus']} GPUs, {row['gpu_hours']} GPU-h, P99 TTFT {row['p99_ttft_ms']} ms, "
        f"attainment {row['attainment']} in {row['search']['wall_s']} s")
    return row


def _elastic(result: SearchResult, workload: Workload, settings: Settings, log: Any) -> dict[str, Any]:
    assert settings.autoscale is not None
    return elastic_replay(result.space, result.confirm.threshold, result.confirm.counts, workload, settings,
                          settings.autoscale, log)


def elastic_replay(space: SearchSpace, threshold: Threshold, counts: tuple[tuple[int, int], ...],
                   workload: Workload, settings: Settings, autoscale: AutoscaleConfig, log: Any) -> dict[str, Any]:
    """Replay the whole trace with every pool autoscaled, starting at ``counts`` and allowed up to
    ``ELASTIC_MAX_FACTOR`` times as many pods."""
    wide = tuple((tp, max(n, math.ceil(n * ELASTIC_MAX_FACTOR))) for tp, n in counts)
    scaler = Autoscaler(autoscale, {s.name: n for s, (_, n) in zip(space.pools, counts, strict=True)})
    runner = TrialRunner(space, settings.slo, settings.seed, log)
    trial = runner.run(workload.full, threshold, wide, "elastic", controller=scaler)
    return {**elastic_row(trial), "max_pods": {s.name: n for s, (_, n) in zip(space.pools, wide, strict=True)},
            "autoscale": dataclasses.asdict(autoscale)}


def narrowed(space: SearchSpace, row: dict[str, Any], policy: str, sim_policy: str,
             options: Mapping[str, str]) -> SearchSpace:
    """``space`` for another policy at the threshold and TP degrees ``row`` chose, starting from its counts."""
    pools = tuple(dataclasses.replace(shape, tp_options=(p["tensor_parallel_size"],))
                  for shape, p in zip(space.pools, row["pools"], strict=True))
    th = row.get("threshold")
    thresholds = (Threshold(th["short_max_model_len"], th["total_threshold_tokens"]),) if th else space.thresholds
    return dataclasses.replace(space, pools=pools, thresholds=thresholds, policy=policy, sim_policy=sim_policy,
                               options=dict(options), guesses={p["name"]: p["pods"] for p in row["pools"]})
