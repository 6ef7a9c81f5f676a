"""``python -m bench.real_engine --engines N --model DIR --trace T (--rate-scale X | --rps R) --duration S
--policy P1,P2,... [--slo-ttft-ms MS] --out F.json``: the replay's routing policies through the router proxy on
real vLLM engines (CPU build, one core each). Engines start once; before every policy they are drained and
their prefix caches flushed, and the policy gets a fresh trainer (+ predictor) + router. Writes F.json
(``policies`` + ``engines`` + ``settings``) and F.png; progress on stderr. Run engine workloads under
``flock /tmp/engine.lock`` on shared machines.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

import orjson

from bench.real_engine import engines, plot, requests_csv, summary
from bench.real_engine.cli import parse_args, plot_path
from bench.real_engine.policies import POLICIES
from bench.real_engine.run import PolicyRun, RunSettings, run_policy, say
from bench.real_engine.workload import Workload, build
from demo import prior
from demo.engine import DEFAULT_MODEL, ENGINE_STARTUP_S, EngineMissing, EngineSpec, start_engines
from demo.procs import PortAllocator, ProcessSet, StartupError
from sim.engine.errors import ConfigError


def engine_spec(args: argparse.Namespace) -> EngineSpec:
    spec = EngineSpec(model_dir=args.model, max_model_len=args.max_model_len, max_num_seqs=128,
                      max_num_batched_tokens=2048)
    if args.python is not None:
        spec = EngineSpec(**{**spec.__dict__, "python": args.python})
    return spec


def settings_doc(args: argparse.Namespace, workload: Workload) -> dict[str, Any]:
    return {"trace": args.trace.name, "trace_start_s": args.trace_start, "duration_s": args.duration,
            "rate_scale": round(workload.rate_scale, 5),
            "rps": args.rps, "offered_rps": round(workload.offered_rps, 4), "requests": len(workload.requests),
            "clipped_prompts": workload.clipped, "slo_ttft_ms": args.slo_ttft_ms, "max_model_len": args.max_model_len,
            "drain_s": args.drain, "coverage_after_s": args.coverage_after, "seed": args.seed,
            "retrain_interval_s": args.retrain_interval, "min_samples_for_retrain": args.min_samples,
            "predictor_timeout_ms": args.predictor_timeout_ms, "policy_order": args.policies,
            "prior_profile": None if (path := prior_profile(args)) is None else path.name}


def prior_profile(args: argparse.Namespace) -> Path | None:
    if args.no_prior_profile:
        return None
    return args.prior_profile or prior.default_profile(args.model, DEFAULT_MODEL)


def result_doc(args: argparse.Namespace, runs: dict[str, PolicyRun], spec: EngineSpec,
               workload: Workload) -> dict[str, Any]:
    policies = {}
    for name, run in runs.items():
        doc = summary.summarise(run.records, run.routed, args.slo_ttft_ms, args.coverage_after)
        doc["clipped_prompts"] = workload.clipped
        doc["fallbacks_by_reason"] = {p["name"]: p.get("fallbacks", {}) for p in run.status.get("pools", [])}
        doc["bundles"] = run.bundles
        doc["load_average"] = run.load_average
        policies[name] = doc
    return {"policies": policies, "engines": engines.describe(spec, args.engines),
            "settings": settings_doc(args, workload)}


def run(args: argparse.Namespace) -> None:
    """Every policy in turn; the outputs are rewritten after each one (a later failure keeps the earlier)."""
    spec = engine_spec(args)
    workload = build(args.trace, args.duration, args.rate_scale, args.rps, args.max_model_len,
                     engines.vocab(spec), args.seed, args.trace_start)
    say(f"{args.trace.name}: {len(workload.requests)} requests in {args.duration:g} s (rate x{workload.rate_scale:.4f}"
        f" = {workload.offered_rps:.3f} req/s), {workload.clipped} prompts clipped to {args.max_model_len}")
    runs: dict[str, PolicyRun] = {}
    with ProcessSet(args.workdir / "engine-logs") as procs:
        started = time.monotonic()
        urls = start_engines(procs, PortAllocator(), spec, args.engines)
        procs.wait_healthy(ENGINE_STARTUP_S)
        engines.warm_up(urls, spec.served_name)
        say(f"{args.engines} engines healthy in {time.monotonic() - started:.0f} s: {', '.join(urls)}")
        profile = prior_profile(args)
        seed_dir = args.workdir / "prior-seed"
        env = {} if profile is None else prior.seed_env(profile, seed_dir)
        settings = RunSettings(tuple(urls), args.max_model_len, args.slo_ttft_ms, args.drain, args.retrain_interval,
                               args.min_samples, args.predictor_timeout_ms, args.seed, env)
        for name in args.policies:
            engines.fresh_state(urls)
            runs[name] = run_policy(POLICIES[name], workload, settings, args.workdir / name)
            doc = result_doc(args, runs, spec, workload)
            done = doc["policies"][name]
            say(f"{name}: errors {done['errors']}, TTFT p50/p99 {done['ttft_ms']['p50']}/{done['ttft_ms']['p99']} ms, "
                f"SLO {done['slo_attainment']}, coverage {done['served_coverage']}")
            write(args.out, doc, runs, workload, args.slo_ttft_ms)


def write(out: Path, doc: dict[str, Any], runs: dict[str, PolicyRun], workload: Workload,
          slo_ttft_ms: float | None) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    requests_csv.write(requests_csv.csv_path(out), [
        row for name, r in runs.items() for row in requests_csv.rows(name, workload.requests, r.records, r.routed)])
    settings = doc["settings"]
    title = (f"{doc['engines']['count']} real vLLM engines (CPU, 1 core each), {settings['trace']}, "
             f"{settings['offered_rps']:.2f} req/s, {settings['duration_s']:g} s per policy")
    ttfts = {n: [x.ttft_ms for x in r.records if summary.ok(x) and x.ttft_ms is not None] for n, r in runs.items()}
    plot.plot(plot_path(out), ttfts, doc["policies"], title, slo_ttft_ms)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _interrupt)
    try:
        run(args)
    except (EngineMissing, StartupError, ValueError, ConfigError) as exc:
        print(f"bench.real_engine: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench.real_engine: interrupted; every child process stopped", file=sys.stderr)
        return 130
    say(f"wrote {args.out}, {plot_path(args.out)} and {requests_csv.csv_path(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
