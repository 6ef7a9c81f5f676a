"""``python -m bench.bench_replay_evaluator``: one routing decision's predictions, XGBoost vs the numpy forest.

The simulator's predicted-latency policy predicts TTFT and TPOT for every candidate pod at each decision with the
bundle its in-process retrainer fitted. This replays a short trace to get such a bundle (the trainer's own fit),
loads it twice — with XGBoost (``shared.boosters``, the trainer's evaluator) and with the predictor's numpy forest
(``shared.forest_loader``) — and times TTFT + TPOT for 4, 8 and 16 candidate rows with each, checking the answers
are equal. Prints a JSON object; ``--out F`` also writes it.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import numpy as np
import orjson

from shared.features import MODEL_NAMES, typical_columns
from shared.forest_loader import forest_loader
from shared.model import LoadedBundle, load_bundle
from sim.cluster.config import single_pool
from sim.cluster.policy import PolicyContext, RequestView
from sim.cluster.registry import PolicyRegistry
from sim.cluster.simulation import ClusterSimulation, ReplayItem
from sim.engine.config import EngineConfig


def trained_bundle(requests: int, seed: int) -> LoadedBundle:
    """The bundle predicted-latency's retrainer fitted on a short replay (2 A100 pods, 3 req/s)."""
    rng, work, t = random.Random(seed), [], 0.0
    for i in range(requests):
        t += rng.expovariate(3.0)
        prompt, output = rng.randint(200, 1200), rng.randint(20, 200)
        hashes = tuple(rng.getrandbits(62) for _ in range(prompt // 16))
        work.append(ReplayItem(RequestView(f"r{i}", t, prompt, output, None, f"k{i}", hashes), output))
    cfg = single_pool(2, EngineConfig.from_preset("llama3-8b-a100"))
    registry = PolicyRegistry()
    policy = registry.build("predicted-latency", PolicyContext(seed=seed, pods=cfg.pod_ids(), options={
        "retrain_interval_s": "15", "min_samples": "50"}))
    ClusterSimulation(cfg, policy, seed=seed).run(work)
    (retrainer,) = policy.models.values()  # type: ignore[attr-defined]
    assert retrainer.model is not None, "no retrain in the replay: more requests"
    return retrainer.model  # type: ignore[no-any-return]


def per_decision_us(model: LoadedBundle, cols: dict[str, np.ndarray], calls: int) -> float:
    for _ in range(50):
        for name in MODEL_NAMES:
            model.predict(name, cols)
    start = time.perf_counter()
    for _ in range(calls):
        for name in MODEL_NAMES:
            model.predict(name, cols)
    return (time.perf_counter() - start) / calls * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_replay_evaluator", description=__doc__.split("\n")[0])
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--requests", type=int, default=600)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    fitted = trained_bundle(args.requests, args.seed)
    spec = fitted.spec
    by_xgboost = load_bundle(fitted.bundle, spec, nthread=1)
    by_forest = load_bundle(fitted.bundle, spec, nthread=1, loader=forest_loader)
    rows = []
    for pods in (4, 8, 16):
        cols = typical_columns(pods, np.random.default_rng(pods))
        equal = all(np.array_equal(by_xgboost.predict(n, cols), by_forest.predict(n, cols)) for n in MODEL_NAMES)
        xgb_us, forest_us = per_decision_us(by_xgboost, cols, args.calls), per_decision_us(by_forest, cols, args.calls)
        rows.append({"pods": pods, "xgboost_us": round(xgb_us, 1), "forest_us": round(forest_us, 1),
                     "ratio": round(forest_us / xgb_us, 3), "equal": equal})
    doc = {"bundle_version": fitted.version, "calls": args.calls, "rows": rows}
    text = orjson.dumps(doc, option=orjson.OPT_INDENT_2)
    print(text.decode())
    if args.out is not None:
        args.out.write_bytes(text)
    return 0 if all(r["equal"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
