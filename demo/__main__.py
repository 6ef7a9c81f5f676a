"""``make demo`` = ``python -m demo``: the whole stack on loopback under a trace-driven load.

Starts sim pods in two pools, a trainer + predictor per pool and the router (child processes, data
under ``./demo-data``), replays the Azure LLM 2023 conversation trace through the router with a streaming
OpenAI client for a bounded time while printing progress, retrains and the predictors' changing predictions.
By default 60 s of its busiest stretch (from +1500 s, 2.5x its rate: ~1,050 requests, ~270 of them to the long
pool), so every pool has the pairs to judge. Then it prints the decision mix, the retrains, the predictions
against the latency the router measured (``demo.truth``) with the client-observed latency split into its parts,
and a one-line verdict (``demo.verdict``: per pool and target, coverage within the two-sided 99 % binomial
interval for its pair count and no dip below 75 % in a 10 s window after the first trained bundle; fewer than 30
pairs are reported, not judged); writes ``demo-summary.json`` and ``demo-report.html`` (plots embedded).
While it runs, the router's and the trainers' status pages (``/ui``) are printed and can be opened.
Every child is stopped at the end, on error and on Ctrl-C.
Trace: "Azure LLM inference trace 2023, Microsoft Azure" (CC-BY 4.0).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import orjson

from demo import prior, report_html, screenshots
from demo.engine import DEFAULT_MODEL, EngineMissing, EngineSpec
from demo.load import LoadStats, run_load
from demo.procs import StartupError
from demo.report import build_summary, print_report
from demo.stack import LONG, REPO, SHORT, PoolSpec, Stack, StackSpec
from demo.truth import Joined, join, write_csv
from demo.watch import Watcher
from demo.workload import DEFAULT_TRACE, ChatWorkload, TokenWorkload, load_trace
from sim.engine.errors import ConfigError


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m demo", description=__doc__.split("\n")[0])
    p.add_argument("--duration", type=float, default=60.0, help="seconds of load (default 60)")
    p.add_argument("--rate-scale", type=float, default=2.5, help="trace arrival-rate multiplier (default 2.5)")
    p.add_argument("--trace-start", type=float, default=1500.0,
                   help="offset into the trace (s; default 1500: its busiest stretch, where about a quarter of the "
                        "conversations go to the long pool)")
    p.add_argument("--time-scale", type=float, default=0.25,
                   help="sim real seconds per simulated second (0.25 = pods run 4x faster)")
    p.add_argument("--retrain-interval", type=float, default=4.0, help="LATENCY_RETRAINING_INTERVAL_SEC")
    p.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    p.add_argument("--workdir", type=Path, default=REPO / "demo-data", help="data + logs (wiped at start)")
    p.add_argument("--summary", type=Path, default=REPO / "demo-summary.json")
    p.add_argument("--screenshots", type=Path, default=None,
                   help="also save PNGs of the status pages and the report into this directory")
    p.add_argument("--report", type=Path, default=None, help="HTML report (default: demo-report.html next to the "
                   "summary)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shed-every", type=float, default=10.0,
                   help="seconds between sheddable requests with an impossible SLO (answered 429)")
    p.add_argument("--engines", type=int, default=0,
                   help="real vLLM engines (one pool, one core each; `make engine` installs them) instead of "
                        "sim pods; 0 = sim pods in two pools (default)")
    p.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="model directory for --engines")
    p.add_argument("--prior-profile", type=Path, default=None,
                   help="with --engines: the engine's measured profile; the trainer starts from a prior learnt "
                        "on it in the simulator (default: the committed profile of the default model)")
    p.add_argument("--no-prior-profile", action="store_true",
                   help="with --engines: start from the built-in GPU prior instead")
    args = p.parse_args(argv)
    if args.prior_profile is not None and not args.prior_profile.is_file():
        p.error(f"--prior-profile {args.prior_profile}: no such file "
                "(a profile from python -m bench.fidelity.engine_profile)")
    if args.engines:
        for name, value in ENGINE_DEFAULTS.items():
            if getattr(args, name) == p.get_default(name):
                setattr(args, name, value)
    return args


ENGINE_DEFAULTS = {"rate_scale": 0.2, "duration": 120.0, "trace_start": 0.0}
"""With real engines: the conversation trace from its start at 0.2x its rate (~0.6 requests/s: two CPU engines
busy, not saturated — they serve ~0.9/s of this mix) for two minutes."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _install_signal_handlers() -> None:
    """Outside the event loop, SIGINT/SIGTERM raise KeyboardInterrupt (the stack then stops its children)."""
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)


async def _drive(stack: Stack, args: argparse.Namespace, stats: LoadStats) -> tuple[Watcher, str]:
    main_task = asyncio.current_task()
    assert main_task is not None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, main_task.cancel)
    rows = load_trace(args.trace, args.rate_scale, args.duration, args.trace_start)
    requests = (TokenWorkload(args.seed, vocab=model_vocab(args.model)).requests(rows) if args.engines
                else ChatWorkload(seed=args.seed).requests(rows))
    print(f"load: {len(rows)} requests from {args.trace.name} (from +{args.trace_start:g} s) over "
          f"{args.duration:.0f} s (rate x{args.rate_scale:g}), streaming chat completions via {stack.router_url}",
          flush=True)
    watcher = Watcher({p: stack.logs(f"trainer-{p}") for p in stack.trainer_urls}, stack.predictor_urls, stats,
                      stack.router_url)
    watch = asyncio.create_task(watcher.run())
    try:
        await run_load(stack.router_url, requests, stats, time.monotonic() + args.duration, args.shed_every)
        await asyncio.sleep(1.5)
        watcher.read_retrains()
        watcher.progress()
    finally:
        watch.cancel()
    async with httpx.AsyncClient(timeout=5.0) as client:
        metrics = (await client.get(stack.router_url + "/metrics")).text
        await watcher.poll_router(client)
    return watcher, metrics


def model_vocab(model_dir: Path) -> int:
    info = model_dir / "tiny_model.json"
    return int(orjson.loads(info.read_bytes())["vocab"]) if info.is_file() else 8192


def pools(args: argparse.Namespace) -> tuple[tuple[PoolSpec, ...], str]:
    if args.engines:
        engine = PoolSpec("engine", args.engines, 4096, engine=EngineSpec(model_dir=args.model))
        return (engine,), f"one pool of {args.engines} real vLLM engines ({args.model.name}, one core each)"
    return (SHORT, LONG), "short 3 pods / 4096 ctx, long 2 pods / 32768 ctx"


def prior_profile(args: argparse.Namespace) -> Path | None:
    """With engines: the measured profile the trainer's seed is learnt from (None: the built-in GPU prior)."""
    if not args.engines or args.no_prior_profile:
        return None
    return args.prior_profile or prior.default_profile(args.model, DEFAULT_MODEL)


def seed_builder(args: argparse.Namespace, profile: Path) -> Callable[[Mapping[str, list[str]]], Mapping[str, str]]:
    """The stack's ``prepare`` hook: build the seed (the profile's physical base) once the engines are up."""
    def build(pod_urls: Mapping[str, list[str]]) -> Mapping[str, str]:
        return prior.seed_env(profile, args.workdir / "prior-seed")
    return build


def run(args: argparse.Namespace) -> tuple[dict[str, Any], list[Joined], Watcher]:
    shutil.rmtree(args.workdir, ignore_errors=True)
    args.workdir.mkdir(parents=True)
    pool_specs, described = pools(args)
    profile = prior_profile(args)
    spec = StackSpec(pools=pool_specs, time_scale=args.time_scale, retrain_interval_s=args.retrain_interval,
                     sync_interval_s=1.0, seed=args.seed, router={"predictor_timeout_ms": 50.0},
                     prepare=None if profile is None else seed_builder(args, profile))
    started = time.monotonic()
    print(f"starting the stack in {args.workdir} (pools: {described}; "
          f"trainer + predictor per pool; router) ...", flush=True)
    with Stack(spec, args.workdir) as stack:
        print(f"stack up in {time.monotonic() - started:.1f} s: router {stack.router_url}", flush=True)
        print("status pages (open while the demo runs; they refresh every 5 s):", flush=True)
        print(f"  router   {stack.router_url}/ui", flush=True)
        for pool, url in stack.trainer_urls.items():
            print(f"  trainer  {url}/ui   (pool {pool})", flush=True)
        stats = LoadStats()
        try:
            watcher, metrics = asyncio.run(_drive(stack, args, stats))
        except asyncio.CancelledError:
            raise KeyboardInterrupt("interrupted") from None
        finally:
            _install_signal_handlers()
        peak_rss = {name: child.peak_rss_mb() for name, child in stack.procs.children.items()}
        if args.screenshots is not None:
            screenshots.take({"router-ui": stack.router_url + "/ui?refresh=0",
                              "trainer-ui": stack.trainer_urls["short"] + "/ui?refresh=0"}, args.screenshots)
    settings = {"duration_s": args.duration, "rate_scale": args.rate_scale, "trace_start_s": args.trace_start,
                "time_scale": args.time_scale,
                "retrain_interval_s": args.retrain_interval, "trace": args.trace.name, "seed": args.seed,
                "engines": args.engines, "pods": "vllm-cpu" if args.engines else "sim",
                "prior_profile": profile.name if profile is not None else ""}
    joined = join(stats.records, watcher.routed, watcher.bundles)
    summary = build_summary(stats.records, watcher, metrics, time.monotonic() - started, settings, joined)
    summary["peak_rss_mib"] = peak_rss
    return summary, joined, watcher


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _install_signal_handlers()
    try:
        summary, joined, watcher = run(args)
    except KeyboardInterrupt:
        print("\ninterrupted: all child processes stopped", file=sys.stderr)
        return 130
    except (StartupError, EngineMissing, ConfigError) as exc:
        print(f"demo: the stack did not start: {exc}", file=sys.stderr)
        return 1
    print_report(summary)
    args.summary.write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    report = args.report or args.summary.with_name("demo-report.html")
    t0 = min((r.sent_wall for r in watcher.stats.records), default=time.time())
    report_html.write(report, summary, joined, watcher.bundles, t0)
    write_csv(args.workdir / "requests.csv", joined, t0)
    if args.screenshots is not None:
        screenshots.take({"demo-report": report.resolve().as_uri()}, args.screenshots)
    print(f"\nwrote {args.summary} and {report}  (logs in {args.workdir / 'logs'}, every judged request in "
          f"{args.workdir / 'requests.csv'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
