"""The demo verdict's ceiling: a time-blind p90 fitted with hindsight, judged as ``make demo`` judges its model.

``python -m bench.trainer.hindsight --run WORKDIR [--run WORKDIR ...] --out F.json``

Each ``--run`` is a ``make demo`` work directory (``python -m demo --workdir``): its trainers' durable sample logs
(``trainer-POOL/log``) and its per-request CSV (``requests.csv``: each request's dispatch time, phase and the p90
the router served). For every pool and target the rows are cut into the verdict's windows (``demo.truth``: 10 s
from the pool's first request a trained bundle served, and the part before) and each window is predicted by a model
fitted on **every other row of the run** — earlier and later, several times what any online model has at that
moment: an XGBoost p90 on ``log1p`` of the latency over the pool's feature matrix, its split-conformal offset taken
on 5-fold out-of-fold residuals of those rows, at tree depths 2, 4 and 6 — a pool and target counts as passed when
any depth passes it (a generous ceiling). It knows the pool's physics and how often its bursts come; what it
cannot know is when (time is not a feature). Its predictions are judged by the demo's own rule
(``demo.verdict``: coverage within the 99 % binomial interval for the pairs, no 10 s window of ≥ 20 pairs below
75 % after the first trained bundle), next to the verdict of what the run served on the same pairs.

The demo's target asks ≥ 4 of 5 seeds to pass. Its pairs are not exchangeable within a window: every seed replays
the same 60 s of the trace, whose long-pool bursts raise the TPOT of requests *after* they were dispatched. The
hindsight model's pass rate measures what these features allow on these runs; ``chance_4_of_5`` is the chance a
batch of five seeds shows ≥ 4 passes at that rate.
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import xgboost as xgb

from bench.common import results
from bench.trainer.learning_replay import records
from demo.binomial import at_least, coverage_interval
from demo.truth import MIN_WINDOW_PAIRS, WINDOW_FLOOR, WINDOW_S
from shared.features import TARGET_OF, FeatureSpec
from trainer.calibrate import conformal_rank
from trainer.fit import matrix_columns
from trainer.store.record import STORED_FIELDS

ALPHA = 0.9
FOLDS = 5
PARAMS = {"objective": "reg:quantileerror", "quantile_alpha": ALPHA, "eta": 0.1, "nthread": 1, "min_child_weight": 3,
          "seed": 0}
DEPTHS = (2, 4, 6)
"""Tree depths tried; a pool and target passes when any of them does (the most generous ceiling)."""
ROUNDS = 150
POOLS = ("short", "long")
SERVED = {"ttft": "predicted_ttft_ms", "tpot": "predicted_tpot_ms"}


@dataclass(frozen=True)
class PoolRows:
    """One pool's rows with a target: features, actual, dispatch second, the p90 the run served, trained phase."""

    x: np.ndarray
    y: np.ndarray
    at: np.ndarray
    served: np.ndarray
    trained: np.ndarray


def read_pool(run: Path, requests: list[dict[str, str]], pool: str) -> tuple[np.ndarray, dict[float, dict[str, str]]]:
    """The pool's logged rows (stored layout) and its CSV rows keyed by router-measured TTFT (to 1 µs)."""
    data = np.concatenate([r.matrix for r in records(run / f"trainer-{pool}" / "log")])
    return data, {round(float(r["ttft_ms"]), 3): r for r in requests if r["pool"] == pool and r["ttft_ms"]}


def pool_rows(data: np.ndarray, by_ttft: dict[float, dict[str, str]], target: str, spec: FeatureSpec) -> PoolRows:
    """The logged rows with ``target`` > 0 that match a request of the run's CSV."""
    y = data[:, STORED_FIELDS.index(TARGET_OF[target])]
    ttft = data[:, STORED_FIELDS.index("actual_ttft_ms")]
    keep = np.array([v > 0 and round(float(t), 3) in by_ttft for v, t in zip(y, ttft, strict=True)])
    rows = [by_ttft[round(float(t), 3)] for t in ttft[keep]]
    served = np.array([float(r[SERVED[target]]) if r[SERVED[target]] else np.nan for r in rows])
    return PoolRows(spec.matrix(target, matrix_columns(target, data[keep], True)), y[keep],
                    np.array([float(r["dispatched_s"]) for r in rows]), served,
                    np.array([r["phase"] == "trained" for r in rows]))


def _fit(x: np.ndarray, z: np.ndarray, depth: int) -> xgb.Booster:
    return xgb.train({**PARAMS, "max_depth": depth}, xgb.DMatrix(x, z), ROUNDS)


def hindsight_p90(x: np.ndarray, z: np.ndarray, x_new: np.ndarray, depth: int = 4) -> np.ndarray:
    """p90 in ms of ``x_new`` from a fit on (``x``, ``z`` = log1p ms), offset by the conformal rank of its
    out-of-fold residuals."""
    fold = np.arange(len(z)) % FOLDS
    oof = np.empty(len(z))
    for k in range(FOLDS):
        held = fold == k
        oof[held] = _fit(x[~held], z[~held], depth).predict(xgb.DMatrix(x[held]))
    resid = np.sort(z - oof)
    offset = float(resid[conformal_rank(len(resid), ALPHA) - 1])
    return np.asarray(np.expm1(_fit(x, z, depth).predict(xgb.DMatrix(x_new)) + offset))


def window_ids(at: np.ndarray, start: float) -> np.ndarray:
    """The verdict's window of each row: −1 before ``start`` (the first trained bundle), then 10 s each."""
    return np.where(at < start, -1, ((at - start) // WINDOW_S).astype(int))


def judged(pred: np.ndarray, y: np.ndarray, windows: np.ndarray) -> dict[str, Any]:
    """The demo's rule on (prediction, actual) pairs: coverage in the 99 % interval, no low window."""
    ok = np.isfinite(pred)
    pred, y, windows = pred[ok], y[ok], windows[ok]
    covered = y <= pred
    low, high = coverage_interval(len(y), ALPHA)
    lows = [float(covered[windows == w].mean()) for w in np.unique(windows[windows >= 0])
            if (windows == w).sum() >= MIN_WINDOW_PAIRS]
    coverage = float(covered.mean())
    lowest = min(lows, default=1.0)
    return {"pairs": int(len(y)), "coverage": round(coverage, 4), "lowest_window": round(lowest, 3),
            "met": bool(low <= coverage <= high and lowest >= WINDOW_FLOOR)}


def leave_window_out(rows: PoolRows, windows: np.ndarray, depth: int) -> np.ndarray:
    """Each window's hindsight p90 from the run's other rows."""
    z = np.log1p(rows.y)
    pred = np.empty(len(z))
    for w in np.unique(windows):
        held = windows == w
        pred[held] = hindsight_p90(rows.x[~held], z[~held], rows.x[held], depth)
    return pred


def judge_pool(rows: PoolRows) -> dict[str, Any]:
    """The run's served p90 and the hindsight p90 of each depth on the same pairs; ``hindsight``: the depth that
    passes (else the one whose lowest window is highest)."""
    start = float(rows.at[rows.trained].min()) if rows.trained.any() else float("inf")
    windows = window_ids(rows.at, start)
    by_depth = {d: judged(leave_window_out(rows, windows, d), rows.y, windows) for d in DEPTHS}
    best = max(DEPTHS, key=lambda d: (by_depth[d]["met"], by_depth[d]["lowest_window"]))
    return {"served": judged(rows.served, rows.y, windows), "hindsight": {**by_depth[best], "depth": best},
            "by_depth": {str(d): j for d, j in by_depth.items()}}


def judge_run(run: Path, spec: FeatureSpec) -> dict[str, Any]:
    with (run / "requests.csv").open() as f:
        requests = list(csv.DictReader(f))
    out: dict[str, Any] = {}
    for pool in POOLS:
        data, by_ttft = read_pool(run, requests, pool)
        for target in SERVED:
            out[f"{pool}/{target}"] = judge_pool(pool_rows(data, by_ttft, target, spec))
    for who in ("served", "hindsight"):
        out[f"{who}_met"] = all(v[who]["met"] for k, v in out.items() if "/" in k)
    return out


def chance_4_of_5(rate: float) -> float:
    """The chance a batch of five seeds passing each with ``rate`` shows at least four passes."""
    return 1.0 if rate >= 1.0 else 0.0 if rate <= 0.0 else at_least(5, rate, 4)


def totals(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": len(runs)}
    for who in ("served", "hindsight"):
        passed = sum(r[f"{who}_met"] for r in runs.values())
        out[f"{who}_passed"] = passed
        out[f"{who}_chance_4_of_5"] = round(chance_4_of_5(passed / len(runs)), 3) if runs else None
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="bench.trainer.hindsight", description=(__doc__ or "").splitlines()[0])
    p.add_argument("--run", type=Path, action="append", required=True,
                   help="a make demo work directory (trainer-POOL/log and requests.csv)")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    for run in args.run:
        if not (run / "requests.csv").is_file() or not all((run / f"trainer-{q}" / "log").is_dir() for q in POOLS):
            p.error(f"--run {run}: needs requests.csv and trainer-short/log, trainer-long/log (a make demo workdir)")
    recording = results.Run("hindsight")
    spec = FeatureSpec()
    runs: dict[str, dict[str, Any]] = {}
    for run in args.run:
        runs[str(run)] = judge_run(run, spec)
        r = runs[str(run)]
        print(f"{run}: served {'MET' if r['served_met'] else 'missed'}, hindsight "
              f"{'MET' if r['hindsight_met'] else 'missed'}; " + "; ".join(
                  f"{k} {v['served']['coverage']}/{v['served']['lowest_window']} vs "
                  f"{v['hindsight']['coverage']}/{v['hindsight']['lowest_window']}" for k, v in r.items() if "/" in k),
              file=sys.stderr, flush=True)
    figures = {"runs": runs, "totals": totals(runs)}
    print(f"totals: {figures['totals']}", file=sys.stderr)
    settings = {"runs": [str(r) for r in args.run], "alpha": ALPHA, "folds": FOLDS, "params": PARAMS,
                "depths": list(DEPTHS), "rounds": ROUNDS}
    recording.write(args.out, settings, figures, indent=2)


if __name__ == "__main__":
    main()
