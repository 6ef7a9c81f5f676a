"""Retrain-cycle time and memory of the proposed fit: TTFT and TPOT concurrently, one thread each.

``python -m bench.quality.timing --rows 100000 --fit-rows 30000 [--family nonadditive]`` prints one
JSON line: wall seconds of the whole cycle (both models, all candidates, all quantiles), thread
CPU seconds per model, the process's peak RSS and the load average. Run each configuration in
its own process so the peak RSS belongs to it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from bench.quality.adapters import Proposed
from bench.quality.family import QUANTILES, TARGETS
from bench.quality.heteroscedastic import Heteroscedastic
from bench.quality.nonadditive import NonAdditive
from bench.quality.proposed import DesignParams

FAMILIES = {"nonadditive": NonAdditive, "heteroscedastic": Heteroscedastic}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.quality.timing")
    ap.add_argument("--rows", type=int, default=100_000, help="window rows per model")
    ap.add_argument("--fit-rows", type=int, default=DesignParams().max_fit_rows)
    ap.add_argument("--family", default="nonadditive", choices=sorted(FAMILIES))
    ap.add_argument("--eta", type=float, default=DesignParams().learning_rate)
    ap.add_argument("--candidates", type=int, default=2, help="first N of the default candidate set")
    args = ap.parse_args(argv)
    family = FAMILIES[args.family]()
    params = DesignParams(max_fit_rows=args.fit_rows, learning_rate=args.eta)
    params = replace(params, candidates=params.candidates[: args.candidates])
    model = Proposed(params)
    train = {t: family.train(t, args.rows, 0) for t in TARGETS}
    load = os.getloadavg()[0]
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=2) as pool:
        fitted = dict(zip(TARGETS, pool.map(lambda t: model.fit(t, train[t], QUANTILES), TARGETS), strict=True))
    wall = time.perf_counter() - started
    print(json.dumps({"rows": args.rows, "fit_rows": args.fit_rows, "candidates": args.candidates, "eta": args.eta,
                      "family": args.family, "cycle_wall_s": round(wall, 3),
                      **{f"{t}_cpu_s": round(f.info["fit_cpu_seconds"], 3) for t, f in fitted.items()},
                      **{f"{t}_rounds": f.info["rounds"] for t, f in fitted.items()},
                      **{f"{t}_chosen": f.info["chosen"] for t, f in fitted.items()},
                      "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                      "loadavg_start": round(load, 2), "loadavg_end": round(os.getloadavg()[0], 2)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
