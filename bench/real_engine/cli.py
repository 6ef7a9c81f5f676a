"""Arguments of ``python -m bench.real_engine`` (parsing and checks only)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.real_engine.policies import POLICIES
from demo.engine import DEFAULT_MODEL
from demo.workload import DEFAULT_TRACE


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.real_engine",
                                description="Replay a trace through the router proxy onto real vLLM engines, "
                                            "once per routing policy (engines started once, caches flushed "
                                            "between policies; a fresh trainer + predictor + router per policy).")
    p.add_argument("--engines", type=int, default=2, help="vLLM engines, one core each (default 2)")
    p.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="model directory (default: make engine's)")
    p.add_argument("--python", type=Path, default=None, help="engine interpreter (default: .venv-engine)")
    p.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="trace CSV (Azure LLM 2023 columns)")
    rate = p.add_mutually_exclusive_group(required=True)
    rate.add_argument("--rate-scale", type=float, default=None, help="arrival-rate multiplier of the trace")
    rate.add_argument("--rps", type=float, default=None, help="rescale arrivals to this mean rate (req/s)")
    p.add_argument("--duration", type=float, required=True, help="seconds of arrivals per policy")
    p.add_argument("--policy", required=True, help="comma-separated: " + ", ".join(POLICIES))
    p.add_argument("--slo-ttft-ms", type=float, default=None,
                   help="TTFT SLO: sent with every request (x-llm-d-slo-ttft-ms) and scored as slo_attainment")
    p.add_argument("--out", type=Path, required=True, help="results JSON (the plot is written next to it, .png)")
    p.add_argument("--max-model-len", type=int, default=4096, help="engine context; longer prompts are clipped")
    p.add_argument("--trace-start", type=float, default=0.0, help="offset into the trace (trace seconds)")
    p.add_argument("--drain", type=float, default=90.0, help="seconds to wait for open requests after the last "
                   "arrival; then they are cancelled and counted as errors")
    p.add_argument("--coverage-after", type=float, default=60.0,
                   help="served coverage is also reported over requests dispatched after this many seconds")
    p.add_argument("--retrain-interval", type=float, default=4.0, help="LATENCY_RETRAINING_INTERVAL_SEC")
    p.add_argument("--min-samples", type=int, default=20, help="LATENCY_MIN_SAMPLES_FOR_RETRAIN")
    p.add_argument("--predictor-timeout-ms", type=float, default=50.0, help="router predictor_timeout_ms")
    p.add_argument("--workdir", type=Path, default=None, help="logs and trainer data (default: next to --out)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prior-profile", type=Path, default=None,
                   help="measured engine profile: every trainer starts from a prior learnt on it in the simulator "
                        "(sim.prior_seed; default: the committed profile when --model is the default model)")
    p.add_argument("--no-prior-profile", action="store_true", help="start every trainer from the built-in GPU prior")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    args.policies = [name.strip() for name in args.policy.split(",") if name.strip()]
    unknown = [name for name in args.policies if name not in POLICIES]
    if unknown or not args.policies:
        p.error(f"unknown policy {unknown or args.policy!r}; known: {', '.join(POLICIES)}")
    if len(set(args.policies)) != len(args.policies):
        p.error("a policy is named twice")
    for name in ("engines", "duration", "max_model_len"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    for name in ("rate_scale", "rps", "slo_ttft_ms"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if args.prior_profile is not None and not args.prior_profile.is_file():
        p.error(f"--prior-profile {args.prior_profile}: no such file "
                "(a profile from python -m bench.fidelity.engine_profile)")
    if args.workdir is None:
        args.workdir = args.out.with_name(args.out.stem + "-work")
    return args


def plot_path(out: Path) -> Path:
    return out.with_suffix(".png")
