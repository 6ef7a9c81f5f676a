"""Accuracy suite (issue 13): workload families with known truth × training rows × models.

Run: ``.venv/bin/python -m bench.quality.suite [--rows 5000,20000,100000] [--families ...]
[--models trainer,v1] [--out results.json] [--quick] [--validation]``. Prints one markdown
table per family and writes every record (JSON) to ``--out``. ``--validation`` scores on
validation data instead of the test sets (analytic families: another seed; sim: 40 % of the
training pool), for design research that must never look at the test set.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pandas as pd
import xgboost as xgb

from bench.common import results
from bench.quality.adapters import V1, Model, Proposed, Trainer
from bench.quality.additive import Additive
from bench.quality.family import Family
from bench.quality.heavytail import HeavyTail
from bench.quality.heteroscedastic import Heteroscedastic
from bench.quality.nonadditive import NonAdditive
from bench.quality.proposed import Candidate, DesignParams
from bench.quality.report import markdown
from bench.quality.runner import Grid, run, with_best_ratio
from bench.quality.simreplay import SimReplay
from bench.quality.threshold import Threshold

FAMILIES: dict[str, Callable[[bool], Family]] = {
    "additive": lambda v: Additive(),
    "nonadditive": lambda v: NonAdditive(),
    "heteroscedastic": lambda v: Heteroscedastic(),
    "heavytail": lambda v: HeavyTail(),
    "threshold": lambda v: Threshold(),
    "sim": lambda v: SimReplay(validation=v),
}
D6, D3M = Candidate("d6", 6, False), Candidate("d3-mono", 3, True)
MODELS: dict[str, Callable[[], Model]] = {
    "trainer": Trainer,
    "trainer-mono": lambda: Trainer("trainer-mono", fit_candidates="depth3"),
    "trainer-scale": lambda: Trainer("trainer-scale", {"scale_weighting": True}),
    "trainer-eta05": lambda: Trainer("trainer-eta05", xgb_learning_rate=0.05, xgb_n_estimators=600),
    "trainer-d8": lambda: Trainer("trainer-d8", fit_candidates="depth6,depth3,depth8"),
    "trainer-q30": lambda: Trainer("trainer-q30", early_stopping_rounds=30),
    "trainer-l1": lambda: Trainer("trainer-l1", base_loss="l1"),
    "trainer-prior5": lambda: Trainer("trainer-prior5", base_prior_rows=5.0),
    "v1": V1,
    "proposed": Proposed,
    "p-selpin": lambda: Proposed(DesignParams(select_by="pinball"), "p-selpin"),
    "p-hold3k": lambda: Proposed(DesignParams(holdout_newest=3_000, holdout_stratified=3_000), "p-hold3k"),
    "p-cold": lambda: Proposed(DesignParams(warm_start=False), "p-cold"),
    "p-significant": lambda: Proposed(DesignParams(calibration="significant"), "p-significant"),
    "p-nocal": lambda: Proposed(DesignParams(calibration="none"), "p-nocal"),
    "p-d6": lambda: Proposed(DesignParams(candidates=(D6,)), "p-d6"),
    "p-d3m": lambda: Proposed(DesignParams(candidates=(D3M,)), "p-d3m"),
    "p-q50k": lambda: Proposed(DesignParams(max_quantile_rows=50_000), "p-q50k"),
    "p-loc20k": lambda: Proposed(DesignParams(max_fit_rows=20_000), "p-loc20k"),
    "p-loc200k": lambda: Proposed(DesignParams(max_fit_rows=200_000), "p-loc200k"),
    "p-loc50k": lambda: Proposed(DesignParams(max_fit_rows=50_000), "p-loc50k"),
}


def _csv(text: str) -> list[str]:
    return [t for t in text.split(",") if t]


def merged(df: pd.DataFrame, previous: Path) -> pd.DataFrame:
    """This run's records plus an earlier run's records of models not run now (same families and rows)."""
    old = pd.DataFrame(results.figures(results.read(previous))["records"])
    old = old[~old["model"].isin(df["model"].unique()) & old["family"].isin(df["family"].unique())
              & old["rows"].isin(df["rows"].unique())]
    return with_best_ratio(pd.concat([old, df.drop(columns="pinball_vs_best")], ignore_index=True))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.quality.suite", description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="5000,20000,100000", help="training rows per fit, comma-separated")
    ap.add_argument("--families", default=",".join(FAMILIES), help=f"any of {','.join(FAMILIES)}")
    ap.add_argument("--models", default="trainer,v1", help=f"any of {','.join(MODELS)}")
    ap.add_argument("--out", type=Path, default=None, help="write all records as JSON")
    ap.add_argument("--quick", action="store_true", help="5k rows, 10k-row test sets, analytic families only")
    ap.add_argument("--validation", action="store_true", help="score on validation data, not the test sets")
    ap.add_argument("--with", dest="previous", type=Path, default=None,
                    help="add the records of other models from an earlier --out file (same grid)")
    args = ap.parse_args(argv)
    unknown = [f for f in _csv(args.families) if f not in FAMILIES] + [m for m in _csv(args.models) if m not in MODELS]
    if unknown:
        ap.error(f"unknown family or model: {', '.join(unknown)}")
    grid = Grid(rows=[int(r) for r in _csv(args.rows)])
    names = _csv(args.families)
    if args.quick:
        grid = replace(grid, rows=[5_000], test_rows=10_000)
        names = [n for n in names if n != "sim"]
    if args.validation:
        grid = replace(grid, train_seed=1, test_seed=1)
    families = [FAMILIES[n](args.validation) for n in names]
    models = [MODELS[m]() for m in _csv(args.models)]
    recording = results.Run("quality-suite")
    started = time.perf_counter()
    df = run(families, models, grid, log=lambda s: print(s, file=sys.stderr, flush=True))
    if args.previous:
        df = merged(df, args.previous)
    machine = {"cores": os.cpu_count(), "python": platform.python_version(), "xgboost": xgb.__version__,
               "loadavg_end": os.getloadavg(), "elapsed_s": round(time.perf_counter() - started, 1),
               "validation": args.validation}
    print(markdown(df, machine))
    if args.out:
        settings = {"families": [f.name for f in families], "models": _csv(args.models), "rows": grid.rows,
                    "test_rows": grid.test_rows, "quick": args.quick, "validation": args.validation,
                    "with": args.previous}
        recording.write(args.out, settings, {"records": df.to_dict(orient="records")})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
