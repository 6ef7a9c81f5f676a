"""``python -m sim.prior_seed``: a profile's physical base for a trainer's first bundle, learnt in the simulator.

    .venv/bin/python -m sim.prior_seed --profile demo/profiles/tiny-llama.json --out DIR

The trainer's built-in prior is the default base (``shared.base.DEFAULT_COEFFICIENTS``: a GPU roofline of an ~8B
model on one GPU). Given an engine's measured profile (``python -m bench.fidelity.engine_profile``: step times vs batch
tokens), this command replays the traces on simulated pods of that engine at several loads (policies round-robin
and least-queue, so idle, queued and overloaded pods are all seen), fits the trainer's own physical base on the
samples (``trainer.fitted.fit_model`` with the base alone: coefficients and each served quantile's spread) and
writes a bundle directory (``manifest.json`` + files) for ``LATENCY_SEED_DIR``: the profile's base (``source``
``profile``), no trees. The bundle is marked ``prior``. A trainer refits the base's level from the engine's first
five rows and its shape as rows arrive (shrunk toward this one), so a machine slower or faster than the one the
profile was measured on needs no factor of its own.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from shared.bundle import MANIFEST, ModelEntry, assemble, manifest_bytes
from shared.features import MODEL_NAMES, FeatureSpec
from shared.timefmt import rfc3339
from sim.cluster.config import ClusterConfig, PoolSpec
from sim.engine.measured import load_profile
from sim.paths import shared_data_dir
from sim.policies.retrainer import sample_matrix
from sim.replay.items import build_items
from sim.replay.runner import run_policy
from sim.workload.trace import load_trace
from trainer.cycle import bundle_meta
from trainer.fit import FitParams
from trainer.fitted import fit_model
from trainer.window import Window

TRACES = {"conv": "azure_llm_2023_conv.csv", "code": "azure_llm_2023_code.csv"}
POLICIES = ("round-robin", "least-queue")


@dataclass(frozen=True)
class SeedPlan:
    profile: Path
    traces: tuple[str, ...] = ("conv", "code")
    rps_per_pod: tuple[float, ...] = (0.05, 0.15, 0.3, 0.5, 0.8)
    pods: int = 2
    requests: int = 400
    """Requests replayed per (trace, load, policy)."""
    pod_class: str = ""
    """The ``pod_class`` the samples carry: what the router sends for these pods ('' unless configured)."""
    seed: int = 0


def trace_file(name: str) -> Path:
    path = Path(name)
    return path if path.suffix == ".csv" else shared_data_dir() / TRACES[name]


def replay_samples(plan: SeedPlan, log: Any = None) -> list[dict[str, float | int | str]]:
    """Training samples from every (trace, load, policy) replay, ``pod_class`` rewritten to the plan's."""
    engine = load_profile(plan.profile).engine_config()
    cfg = ClusterConfig(pools=(PoolSpec("pod", plan.pods, engine),))
    samples: list[dict[str, float | int | str]] = []
    for trace in plan.traces:
        rows = load_trace(trace_file(trace), 1.0, plan.requests)
        span = max(rows[-1].arrival_s - rows[0].arrival_s, 1e-3) if len(rows) > 1 else 1.0
        native = len(rows) / span
        for rps in plan.rps_per_pod:
            scaled = load_trace(trace_file(trace), rps * plan.pods / native, plan.requests)
            items = build_items(scaled, plan.seed)
            for policy in POLICIES:
                _, result = run_policy(cfg, items, policy, plan.seed)
                samples.extend({**s, "pod_class": plan.pod_class} for s in result.samples)
                if log is not None:
                    print(f"prior_seed: {trace} {rps:g} req/s/pod {policy}: {len(result.samples)} samples",
                          file=log)
    return samples


def fit_seed(samples: Sequence[Mapping[str, float | int | str]], params: FitParams,
             spec: FeatureSpec) -> dict[str, tuple[dict[str, bytes], ModelEntry]]:
    """Both models' bases fitted on ``samples`` as the trainer fits them (a window with its newest rows held out;
    no trees), marked ``prior``, the base's source ``profile``. The rows are shuffled first (seeded): the
    calibration rows are then a sample of every replayed load, not the last, most loaded replay."""
    params = replace(params, tree_min_rows=len(samples) + 1)
    matrix = sample_matrix(samples)
    matrix = matrix[np.random.default_rng(params.seed).permutation(len(matrix))]
    window = Window(cap=5000, ratio=0.1, max_test=2000, total=len(samples) + 1)
    window.add(0, matrix, 0.0)
    models: dict[str, tuple[dict[str, bytes], ModelEntry]] = {}
    for name in MODEL_NAMES:
        train, holdout = window.snapshot(name)
        fitted = fit_model(spec, name, train, holdout, params)
        base = fitted.entry.base.model_copy(update={"source": "profile"}) if fitted.entry.base else None
        models[name] = (fitted.files, fitted.entry.model_copy(update={"prior": True, "base": base}))
    return models


def write_seed(out: Path, models: Mapping[str, tuple[dict[str, bytes], ModelEntry]], params: FitParams,
               spec: FeatureSpec, source: Mapping[str, Any]) -> Path:
    """``out`` holds ``manifest.json`` and the model files (unsigned: a trainer with an HMAC key signs what it
    republishes, and reads this directory with its own key — give none, or sign it yourself)."""
    meta = {**bundle_meta(spec, params, prior=True), "seed_source": dict(source)}
    manifest, files = assemble(1, rfc3339(), models, meta, None)
    out.mkdir(parents=True, exist_ok=True)
    for name, blob in files.items():
        (out / name).write_bytes(blob)
    (out / MANIFEST).write_bytes(manifest_bytes(manifest))
    return out


def build_seed(plan: SeedPlan, out: Path, params: FitParams | None = None, log: Any = None) -> Path:
    spec = FeatureSpec()
    params = params or FitParams()
    samples = replay_samples(plan, log)
    if len(samples) < 50:
        raise SystemExit(f"prior_seed: only {len(samples)} samples replayed; raise --requests or the loads")
    models = fit_seed(samples, params, spec)
    source = {"profile": plan.profile.name, "traces": list(plan.traces), "rps_per_pod": list(plan.rps_per_pod),
              "pods": plan.pods, "samples": len(samples), "pod_class": plan.pod_class}
    path = write_seed(out, models, params, spec, source)
    if log is not None:
        cov = {n: e.metrics.get("coverage") for n, (_, e) in models.items()}
        print(f"prior_seed: wrote {path} from {len(samples)} samples (sim holdout coverage {cov})", file=log)
    return path


def parse_floats(text: str) -> tuple[float, ...]:
    values = tuple(float(x) for x in text.split(",") if x.strip())
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive comma-separated numbers, got {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sim.prior_seed", description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", type=Path, required=True, help="measured engine profile JSON")
    p.add_argument("--out", type=Path, required=True, help="directory written (for LATENCY_SEED_DIR)")
    p.add_argument("--traces", default="conv,code", help="trace names (conv, code) or CSV paths, comma-separated")
    p.add_argument("--rps-per-pod", type=parse_floats, default=SeedPlan.rps_per_pod,
                   help="arrival rates replayed, requests/s per pod, comma-separated")
    p.add_argument("--pods", type=int, default=SeedPlan.pods)
    p.add_argument("--requests", type=int, default=SeedPlan.requests, help="requests per replay")
    p.add_argument("--pod-class", default="", help="pod_class the router sends for these pods")
    p.add_argument("--seed", type=int, default=0)
    return p


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    plan = SeedPlan(args.profile, tuple(t.strip() for t in args.traces.split(",") if t.strip()), args.rps_per_pod,
                    args.pods, args.requests, args.pod_class, args.seed)
    build_seed(plan, args.out, log=sys.stderr)


if __name__ == "__main__":
    main()
