"""Probe: incremental boosting from the live model vs a fresh location fit, two consecutive cycles.

``python -m bench.quality.incremental [--rows 100000] [--new 10000] [--rounds 20]``: cycle 1 fits the
proposed design on rows [0, N); cycle 2 sees rows [new, N + new) and either refits from scratch
or continues cycle 1's location booster (``xgb.train(..., xgb_model=previous)``) for ``--rounds``
rounds before the quantile trees. Prints thread-CPU seconds and validation p90 MAPE of each.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import xgboost as xgb

from bench.quality.adapters import SPEC
from bench.quality.metrics import score
from bench.quality.nonadditive import NonAdditive
from bench.quality.proposed import Candidate, DesignParams, fit_quantiles
from trainer.fit import MONOTONE_UP


def _quantiles_from(location: xgb.Booster, x: np.ndarray, z: np.ndarray, p: DesignParams) -> list[xgb.Booster]:
    cut = int(len(z) * 0.95)
    names = list(SPEC.columns("ttft"))
    dq = xgb.QuantileDMatrix(x[:cut][-p.max_quantile_rows:], z[:cut][-p.max_quantile_rows:], max_bin=p.max_bin,
                             nthread=1, feature_names=names)
    dstop = xgb.QuantileDMatrix(x[cut:], z[cut:], ref=dq, max_bin=p.max_bin, nthread=1, feature_names=names)
    out = []
    for a in p.quantiles:
        params = {"tree_method": "hist", "max_depth": 6, "eta": p.learning_rate, "max_bin": p.max_bin, "nthread": 1,
                  "objective": "reg:quantileerror", "quantile_alpha": a, "eval_metric": "quantile"}
        b = xgb.train(params, dq, p.quantile_rounds, evals=[(dstop, "s")], early_stopping_rounds=p.early_stopping,
                      xgb_model=location, verbose_eval=False)
        out.append(b[: b.best_iteration + 1])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.quality.incremental")
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--new", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args(argv)
    family = NonAdditive()
    data = family.train("ttft", args.rows + args.new, 3)
    val = family.test("ttft", 50_000, 3)
    x_all, z_all = SPEC.matrix("ttft", data.cols), np.log1p(data.y)
    p = DesignParams(candidates=(Candidate("d6", 6, False),))
    strata = np.zeros(args.rows, np.int64)
    first = fit_quantiles(x_all[: args.rows], data.y[: args.rows], SPEC.columns("ttft"), MONOTONE_UP["ttft"], strata, p)
    x2, z2 = x_all[args.new:], z_all[args.new:]
    t = time.thread_time()
    fresh = fit_quantiles(x2, data.y[args.new:], SPEC.columns("ttft"), MONOTONE_UP["ttft"], strata, p)
    fresh_cpu = time.thread_time() - t
    t = time.thread_time()
    n_loc = first.info["location_rounds"]
    location = first.boosters[1][:n_loc]
    d2 = xgb.QuantileDMatrix(x2, z2, max_bin=p.max_bin, nthread=1, feature_names=list(SPEC.columns("ttft")))
    location = xgb.train({"tree_method": "hist", "max_depth": 6, "eta": p.learning_rate, "max_bin": p.max_bin,
                          "nthread": 1, "objective": "reg:squarederror"}, d2, args.rounds, xgb_model=location)
    boosters = _quantiles_from(location, x2, z2, p)
    inc_cpu = time.thread_time() - t
    x_val = SPEC.matrix("ttft", val.cols)
    inc_pred = {a: np.expm1(b.inplace_predict(x_val, validate_features=False))
                for a, b in zip(p.quantiles, boosters, strict=True)}
    fresh_pred = fresh.predict(x_val)
    print(json.dumps({"fresh_cpu_s": round(fresh_cpu, 2), "incremental_cpu_s": round(inc_cpu, 2),
                      "fresh_mape_p90": round(score(val, {0.9: fresh_pred[:, 1]})[0.9]["mape"], 4),
                      "incremental_mape_p90_uncalibrated": round(score(val, {0.9: inc_pred[0.9]})[0.9]["mape"], 4),
                      "location_rounds": [n_loc, location.num_boosted_rounds()],
                      "loadavg": os.getloadavg()[0]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
