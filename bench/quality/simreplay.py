"""Family (e) sim-generated: the conv trace replayed through ``sim`` on 8 pods at several loads.

Each run replays ``azure_llm_2023_conv.csv`` (19,366 requests) on 8 simulated A100 pods with a
built-in policy (``round-robin`` or ``least-queue``, alternating) at rate scales 6, 8, 9.5 and 11
(≈ 50–95 % of saturation); the rows are the router's dispatch-time features with the measured
TTFT / TPOT (``ReplayResult.samples``, in completion order). Runs with seeds 0–2 form the
training pool, runs with seed 3 the test set, so no test row comes from a trajectory a fit saw.
A training set of ``n`` rows is a random subset of the pool in random order: the trace's load
is not stationary (a burst in its middle third takes TTFT p90 from 0.3 s to 7.7 s, its last
tenth drains the cluster), and a test set spanning whole trajectories is not "the future" of
any time-ordered window, so the family measures how well the conditional distribution is
learnt from the router's features, not drift (a time-split holdout of this pool is a random one).

The true conditional quantile is not known: Monte-Carlo over noise seeds would change the
trajectory (and so the features) of every later request. Only pinball, pinball ÷ the best of
the compared models, and coverage apply. Replays are cached (``.npz``) under ``bench/out/``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.common.paths import OUT
from bench.quality.family import Split
from shared.features import FEATURE_FIELDS, RAW_FEATURE_NAMES, TARGET_OF, FieldKind
from sim.cluster.config import ClusterConfig, PoolSpec
from sim.engine.config import EngineConfig
from sim.paths import default_trace
from sim.replay.items import build_items
from sim.replay.runner import run_policy
from sim.workload.trace import load_trace

RATE_SCALES: tuple[float, ...] = (6.0, 8.0, 9.5, 11.0)
POLICIES: tuple[str, ...] = ("round-robin", "least-queue")
TRAIN_SEEDS: tuple[int, ...] = (0, 1, 2)
TEST_SEEDS: tuple[int, ...] = (3,)
PODS = 8
FIELDS = (*RAW_FEATURE_NAMES, "actual_ttft_ms", "actual_tpot_ms")
CACHE = OUT / "quality-sim-v2.npz"
LABELS = {f.name: f.encode for f in FEATURE_FIELDS if f.kind is FieldKind.LABEL}


@dataclass(frozen=True)
class RunSpec:
    rate_scale: float
    seed: int

    @property
    def policy(self) -> str:
        return POLICIES[(RATE_SCALES.index(self.rate_scale) + self.seed) % len(POLICIES)]


def replay(run: RunSpec, limit: int | None = None) -> np.ndarray:
    """One replay → (rows, len(FIELDS)) float64 matrix plus a last column: completion rank in [0, 1)."""
    cfg = ClusterConfig(pools=(PoolSpec("pod", PODS, EngineConfig.from_preset("llama3-8b-a100")),))
    items = build_items(load_trace(default_trace(), rate_scale=run.rate_scale, limit=limit), seed=run.seed)
    _, result = run_policy(cfg, items, run.policy, seed=run.seed)
    n = len(result.samples)
    out = np.empty((n, len(FIELDS) + 1))
    for j, name in enumerate(FIELDS):
        values = [s[name] for s in result.samples]
        encode = LABELS.get(name)
        out[:, j] = [encode(str(v)) for v in values] if encode is not None else values
    out[:, -1] = np.arange(n) / max(n, 1)
    return out


def build_pool(seeds: tuple[int, ...], limit: int | None = None, log: bool = True) -> np.ndarray:
    parts = []
    for seed in seeds:
        for rate in RATE_SCALES:
            started = time.perf_counter()
            parts.append(replay(RunSpec(rate, seed), limit))
            if log:
                print(f"  sim replay rate x{rate} seed {seed} ({RunSpec(rate, seed).policy}): "
                      f"{len(parts[-1]):,} rows in {time.perf_counter() - started:.1f} s", flush=True)
    merged = np.concatenate(parts)
    return merged[np.argsort(merged[:, -1], kind="stable")]


def _validation_pools(train: np.ndarray) -> dict[str, np.ndarray]:
    """For design research: 60 % of the training pool to fit, 40 % to score; the test runs stay unseen."""
    mask = np.random.default_rng(11).random(len(train)) < 0.6
    return {"train": train[mask], "test": train[~mask]}


class SimReplay:
    name = "sim"
    analytic = False

    def __init__(self, cache: Path = CACHE, limit: int | None = None, validation: bool = False) -> None:
        self.cache, self.limit, self.validation = cache, limit, validation
        self._pools: dict[str, np.ndarray] | None = None

    def pools(self) -> dict[str, np.ndarray]:
        if self._pools is None:
            if self.limit is None and self.cache.is_file():
                with np.load(self.cache) as data:
                    self._pools = {"train": data["train"], "test": data["test"]}
            else:
                self._pools = {"train": build_pool(TRAIN_SEEDS, self.limit), "test": build_pool(TEST_SEEDS, self.limit)}
                if self.limit is None:
                    self.cache.parent.mkdir(parents=True, exist_ok=True)
                    np.savez(self.cache, train=self._pools["train"], test=self._pools["test"])
            if self.validation:
                self._pools = _validation_pools(self._pools["train"])
        return self._pools

    def _split(self, pool: np.ndarray, target: str) -> Split:
        y_col = FIELDS.index(TARGET_OF[target])
        rows = pool[pool[:, y_col] > 0]
        return Split({name: rows[:, j] for j, name in enumerate(RAW_FEATURE_NAMES)}, rows[:, y_col], None)

    def available(self, target: str) -> int:
        return len(self._split(self.pools()["train"], target))

    def train(self, target: str, n: int, seed: int) -> Split:
        full = self._split(self.pools()["train"], target)
        if n > len(full):
            raise ValueError(f"sim family: {n:,} training rows asked, the pool has {len(full):,} ({target})")
        return full.take(np.random.default_rng([seed, 7]).choice(len(full), n, replace=False)).check()

    def test(self, target: str, n: int, seed: int) -> Split:
        full = self._split(self.pools()["test"], target)
        if n > len(full):
            raise ValueError(f"sim family: {n:,} test rows asked, the test runs have {len(full):,} ({target})")
        return full.check()
