"""The grid: family × target × training rows × model → scores on a fresh test set, as DataFrame rows.

TTFT and TPOT of one (family, rows) cell are fitted concurrently in two threads (as the trainer
does), each fit on one XGBoost thread; wall and thread-CPU seconds are measured inside the fit's
thread. The test set of a (family, target) is drawn once (seed ``test_seed``) and shared by
every model and size, so models are compared on identical rows.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pandas as pd

from bench.quality.adapters import Model
from bench.quality.family import QUANTILES, TARGETS, Family, Split
from bench.quality.metrics import score

Log = Callable[[str], None]


@dataclass(frozen=True)
class Grid:
    rows: Sequence[int] = (5_000, 20_000, 100_000)
    test_rows: int = 50_000
    quantiles: tuple[float, ...] = QUANTILES
    targets: tuple[str, ...] = TARGETS
    train_seed: int = 0
    test_seed: int = 0


def _fit_and_score(model: Model, family: Family, target: str, n: int, test: Split, grid: Grid) -> list[dict]:
    train = family.train(target, n, grid.train_seed)
    started, cpu = time.perf_counter(), time.thread_time()
    fitted = model.fit(target, train, grid.quantiles)
    wall, cpu_s = time.perf_counter() - started, time.thread_time() - cpu
    scores = score(test, fitted.predict(test.cols))
    info = {k: v for k, v in fitted.info.items() if isinstance(v, (int, float, str))}
    return [{"family": family.name, "target": target, "rows": n, "model": model.name, "quantile": alpha,
             **s, "fit_wall_s": wall, "fit_cpu_s": cpu_s, "test_rows": len(test), **info}
            for alpha, s in scores.items()]


def run(families: Sequence[Family], models: Sequence[Model], grid: Grid, log: Log = print) -> pd.DataFrame:
    records: list[dict[str, Any]] = []
    for family in families:
        tests = {t: family.test(t, grid.test_rows, grid.test_seed) for t in grid.targets}
        for n in sizes_available(family, grid.rows):
            for model in models:
                load = os.getloadavg()[0]
                with ThreadPoolExecutor(max_workers=2, thread_name_prefix="fit") as pool:
                    k = len(grid.targets)
                    parts = list(pool.map(_fit_and_score, [model] * k, [family] * k, grid.targets, [n] * k,
                                          [tests[t] for t in grid.targets], [grid] * k))
                for part in parts:
                    for r in part:
                        r["loadavg"] = load
                    records += part
                p90 = [r for part in parts for r in part if r["quantile"] == 0.9]
                log(f"{family.name:>15} {n:>7,} {model.name:>10}: " + ", ".join(
                    f"{r['target']} cov {r['coverage']:.3f} mape {r.get('mape', float('nan')):.3f} "
                    f"fit {r['fit_wall_s']:.1f}s" for r in p90) + f" (load {load:.1f})")
    return with_best_ratio(pd.DataFrame.from_records(records))


def with_best_ratio(df: pd.DataFrame) -> pd.DataFrame:
    """``pinball_vs_best``: pinball ÷ the lowest pinball of the models compared in the same cell."""
    best = df.groupby(["family", "target", "rows", "quantile"])["pinball"].transform("min")
    return df.assign(pinball_vs_best=df["pinball"] / best)


def sizes_available(family: Family, rows: Sequence[int]) -> list[int]:
    """The sizes a replayed family can serve (its pool is finite); analytic families serve any."""
    avail = getattr(family, "available", None)
    if avail is None:
        return list(rows)
    limit = min(avail(t) for t in TARGETS)
    return [n for n in rows if n <= limit]
