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

**Causal ceilings** (``--causal``): what an online learner could serve without the trainer's lags. Every
``STEP_S`` second it refits on every row the trainer had *received* before that moment (a record's wall time, set
on the CSV's dispatch clock by the 1st percentile of their difference: no retrain interval, no publish gate, no
router correction) and predicts the rows dispatched in the next second; before ``CAUSAL_MIN_ROWS`` rows arrived a
row keeps what the run served. Learners (``LEARNERS``): ``blind`` — the hindsight p90 on the rows received (offset
on all their out-of-fold residuals), ``newest`` — the same trees with the offset on the out-of-fold residuals of the
newest quarter (at most ``MIN_NEWEST``, the trainer's rule), each at depths 2 and 4. ``causal_union`` passes a run
when, for each pool and target, the served p90 or any causal learner passes it — an oracle that picks the best
learner per pool and target after seeing the run, which no online system can do.
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
from trainer.fitted import MIN_NEWEST
from trainer.store.record import STORED_FIELDS

ALPHA = 0.9
FOLDS = 5
PARAMS = {"objective": "reg:quantileerror", "quantile_alpha": ALPHA, "eta": 0.1, "nthread": 1, "min_child_weight": 3,
          "seed": 0}
DEPTHS = (2, 4, 6)
"""Tree depths tried; a pool and target passes when any of them does (the most generous ceiling)."""
ROUNDS = 150
POOLS = ("short", "long")
STEP_S = 1.0
CAUSAL_MIN_ROWS = 30
CAUSAL_DEPTHS = (2, 4)
LEARNERS = ("blind", "newest")
SERVED = {"ttft": "predicted_ttft_ms", "tpot": "predicted_tpot_ms"}


@dataclass(frozen=True)
class PoolRows:
    """One pool's rows with a target: features, actual, dispatch second, the p90 the run served, trained phase."""

    x: np.ndarray
    y: np.ndarray
    at: np.ndarray
    served: np.ndarray
    trained: np.ndarray
    received: np.ndarray
    """When the trainer had the row, on the dispatch clock (its record's wall time, aligned; ≥ its dispatch)."""


@dataclass(frozen=True)
class PoolLog:
    data: np.ndarray
    """The pool's logged rows (stored layout)."""
    wall: np.ndarray
    """Each row's record wall time (when the trainer received it)."""
    by_ttft: dict[float, dict[str, str]]
    """The pool's CSV rows keyed by router-measured TTFT (to 1 µs)."""


def read_pool(run: Path, requests: list[dict[str, str]], pool: str) -> PoolLog:
    recs = records(run / f"trainer-{pool}" / "log")
    return PoolLog(np.concatenate([r.matrix for r in recs]),
                   np.concatenate([np.full(r.n_rows, r.wall_time) for r in recs]),
                   {round(float(r["ttft_ms"]), 3): r for r in requests if r["pool"] == pool and r["ttft_ms"]})


def received_at(wall: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Record wall times on the dispatch clock: shifted by the 1st percentile of ``wall − at`` (robust to a stray
    match), and never before the row's own dispatch."""
    return np.maximum(wall - float(np.percentile(wall - at, 1)), at)


def pool_rows(log: PoolLog, target: str, spec: FeatureSpec) -> PoolRows:
    """The logged rows with ``target`` > 0 that match a request of the run's CSV."""
    data, by_ttft = log.data, log.by_ttft
    y = data[:, STORED_FIELDS.index(TARGET_OF[target])]
    ttft = data[:, STORED_FIELDS.index("actual_ttft_ms")]
    keep = np.array([v > 0 and round(float(t), 3) in by_ttft for v, t in zip(y, ttft, strict=True)])
    rows = [by_ttft[round(float(t), 3)] for t in ttft[keep]]
    served = np.array([float(r[SERVED[target]]) if r[SERVED[target]] else np.nan for r in rows])
    at = np.array([float(r["dispatched_s"]) for r in rows])
    return PoolRows(spec.matrix(target, matrix_columns(target, data[keep], True)), y[keep], at, served,
                    np.array([r["phase"] == "trained" for r in rows]), received_at(log.wall[keep], at))


def _fit(x: np.ndarray, z: np.ndarray, depth: int) -> xgb.Booster:
    return xgb.train({**PARAMS, "max_depth": depth}, xgb.DMatrix(x, z), ROUNDS)


def _residuals_and_raw(x: np.ndarray, z: np.ndarray, x_new: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """The out-of-fold residuals of (``x``, ``z`` = log1p ms) and the full fit's raw output on ``x_new``."""
    fold = np.arange(len(z)) % FOLDS
    oof = np.empty(len(z))
    for k in range(FOLDS):
        held = fold == k
        oof[held] = _fit(x[~held], z[~held], depth).predict(xgb.DMatrix(x[held]))
    return z - oof, _fit(x, z, depth).predict(xgb.DMatrix(x_new))


def _p90(raw: np.ndarray, resid: np.ndarray) -> np.ndarray:
    """``raw`` (log1p ms) offset by the conformal rank of ``resid``, in ms."""
    return np.asarray(np.expm1(raw + float(np.sort(resid)[conformal_rank(len(resid), ALPHA) - 1])))


def hindsight_p90(x: np.ndarray, z: np.ndarray, x_new: np.ndarray, depth: int = 4) -> np.ndarray:
    """p90 in ms of ``x_new`` from a fit on (``x``, ``z`` = log1p ms), offset by the conformal rank of its
    out-of-fold residuals."""
    resid, raw = _residuals_and_raw(x, z, x_new, depth)
    return _p90(raw, resid)


def newest_rows(received: np.ndarray) -> np.ndarray:
    """Indices of the newest quarter of the rows, at most the trainer's ``MIN_NEWEST`` (its rule), and at least 20
    (a conformal p90 needs 9)."""
    keep = max(20, min(MIN_NEWEST, len(received) // 4))
    return np.argsort(received, kind="stable")[-keep:]


def causal_p90s(rows: PoolRows, depth: int) -> dict[str, np.ndarray]:
    """Each learner's p90 of every row, from one refit per ``STEP_S`` on the rows received before that step (what
    the run served until ``CAUSAL_MIN_ROWS`` had arrived): the learners share the trees, only their offsets differ."""
    z = np.log1p(rows.y)
    preds = {learner: rows.served.copy() for learner in LEARNERS}
    for start in np.arange(0.0, float(rows.at.max(initial=0.0)) + STEP_S, STEP_S):
        now = (rows.at >= start) & (rows.at < start + STEP_S)
        seen = rows.received < start
        if not now.any() or seen.sum() < CAUSAL_MIN_ROWS:
            continue
        resid, raw = _residuals_and_raw(rows.x[seen], z[seen], rows.x[now], depth)
        preds["blind"][now] = _p90(raw, resid)
        preds["newest"][now] = _p90(raw, resid[newest_rows(rows.received[seen])])
    return preds


def causal_p90(rows: PoolRows, learner: str, depth: int) -> np.ndarray:
    """One learner's p90 of every row (``causal_p90s``)."""
    return causal_p90s(rows, depth)[learner]


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


def judge_pool(rows: PoolRows, causal: bool = False) -> dict[str, Any]:
    """The run's served p90 and the hindsight p90 of each depth on the same pairs; ``hindsight``: the depth that
    passes (else the one whose lowest window is highest). With ``causal``, each causal learner at each depth too."""
    start = float(rows.at[rows.trained].min()) if rows.trained.any() else float("inf")
    windows = window_ids(rows.at, start)
    by_depth = {d: judged(leave_window_out(rows, windows, d), rows.y, windows) for d in DEPTHS}
    best = max(DEPTHS, key=lambda d: (by_depth[d]["met"], by_depth[d]["lowest_window"]))
    out = {"served": judged(rows.served, rows.y, windows), "hindsight": {**by_depth[best], "depth": best},
           "by_depth": {str(d): j for d, j in by_depth.items()}}
    if causal:
        preds = {d: causal_p90s(rows, d) for d in CAUSAL_DEPTHS}
        out["causal"] = {f"{learner}{d}": judged(preds[d][learner], rows.y, windows)
                         for learner in LEARNERS for d in CAUSAL_DEPTHS}
    return out


def judge_run(run: Path, spec: FeatureSpec, causal: bool = False) -> dict[str, Any]:
    with (run / "requests.csv").open() as f:
        requests = list(csv.DictReader(f))
    out: dict[str, Any] = {}
    for pool in POOLS:
        log = read_pool(run, requests, pool)
        for target in SERVED:
            out[f"{pool}/{target}"] = judge_pool(pool_rows(log, target, spec), causal)
    parts = [v for k, v in out.items() if "/" in k]
    for who in ("served", "hindsight"):
        out[f"{who}_met"] = all(v[who]["met"] for v in parts)
    if causal:
        learners = list(parts[0]["causal"])
        out["causal_met"] = {name: all(v["causal"][name]["met"] for v in parts) for name in learners}
        out["causal_union_met"] = all(v["served"]["met"] or any(j["met"] for j in v["causal"].values())
                                      for v in parts)
    return out


def chance_4_of_5(rate: float) -> float:
    """The chance a batch of five seeds passing each with ``rate`` shows at least four passes."""
    return 1.0 if rate >= 1.0 else 0.0 if rate <= 0.0 else at_least(5, rate, 4)


def totals(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": len(runs)}
    counts = {who: [bool(r[f"{who}_met"]) for r in runs.values()] for who in ("served", "hindsight")}
    if runs and all("causal_met" in r for r in runs.values()):
        first = next(iter(runs.values()))["causal_met"]
        counts.update({f"causal_{name}": [bool(r["causal_met"][name]) for r in runs.values()] for name in first})
        counts["causal_union"] = [bool(r["causal_union_met"]) for r in runs.values()]
    for who, met in counts.items():
        out[f"{who}_passed"] = sum(met)
        out[f"{who}_chance_4_of_5"] = round(chance_4_of_5(sum(met) / len(runs)), 3) if runs else None
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="bench.trainer.hindsight", description=(__doc__ or "").splitlines()[0])
    p.add_argument("--run", type=Path, action="append", required=True,
                   help="a make demo work directory (trainer-POOL/log and requests.csv)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--causal", action="store_true",
                   help="also the causal ceilings: learners refitted every second on the rows received so far")
    args = p.parse_args(argv)
    for run in args.run:
        if not (run / "requests.csv").is_file() or not all((run / f"trainer-{q}" / "log").is_dir() for q in POOLS):
            p.error(f"--run {run}: needs requests.csv and trainer-short/log, trainer-long/log (a make demo workdir)")
    recording = results.Run("hindsight")
    spec = FeatureSpec()
    runs: dict[str, dict[str, Any]] = {}
    for run in args.run:
        runs[str(run)] = judge_run(run, spec, args.causal)
        r = runs[str(run)]
        causal = "" if not args.causal else ", causal " + " ".join(
            f"{k} {'MET' if v else 'missed'}" for k, v in r["causal_met"].items()) + \
            f", union {'MET' if r['causal_union_met'] else 'missed'}"
        print(f"{run}: served {'MET' if r['served_met'] else 'missed'}, hindsight "
              f"{'MET' if r['hindsight_met'] else 'missed'}{causal}; " + "; ".join(
                  f"{k} {v['served']['coverage']}/{v['served']['lowest_window']} vs "
                  f"{v['hindsight']['coverage']}/{v['hindsight']['lowest_window']}" for k, v in r.items() if "/" in k),
              file=sys.stderr, flush=True)
    figures = {"runs": runs, "totals": totals(runs)}
    print(f"totals: {figures['totals']}", file=sys.stderr)
    settings = {"runs": [str(r) for r in args.run], "alpha": ALPHA, "folds": FOLDS, "params": PARAMS,
                "depths": list(DEPTHS), "rounds": ROUNDS, "causal": args.causal}
    if args.causal:
        settings.update(step_s=STEP_S, causal_min_rows=CAUSAL_MIN_ROWS, causal_depths=list(CAUSAL_DEPTHS),
                        learners=list(LEARNERS), newest_rows_max=MIN_NEWEST)
    recording.write(args.out, settings, figures, indent=2)


if __name__ == "__main__":
    main()
