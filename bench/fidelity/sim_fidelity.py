"""``python -m bench.fidelity.sim_fidelity``: the same request stream on one real engine and in the simulator.

    flock /tmp/engine.lock .venv/bin/python -m bench.fidelity.sim_fidelity --model .venv-engine/models/tiny-llama \\
        --trace ../shared/data/azure_llm_2023_conv.csv --loads 0.3,0.6,0.9 --out bench/out/fidelity.json

One engine serves everything: unless ``--profile`` names an existing file, its step times are measured first
(:mod:`bench.fidelity.engine_profile`, written to ``--profile`` or next to ``--out``), so the profile is taken close
in time to the comparison. The simulator is configured from that profile alone (never from the comparison
runs). Loads are fractions of the saturation throughput the profile predicts for the trace's request mix
(:mod:`bench.fidelity.saturation`). Per load: a trace slice with ``--duration`` seconds of arrivals at
that rate (:mod:`bench.fidelity.workload`), played open loop on the engine (prefix cache reset first) and
run in virtual time by ``sim.engine.openloop`` with the same arrivals, lengths and block hashes. Output:
``{"rows": [{"load", "metric", "real", "sim", "rel_err"}], ...}`` with ``rel_err = (sim - real) / real``;
``--repeat L`` plays load ``L`` on the engine a second time and reports the real-vs-real difference
(``noise``). Progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from bench.fidelity.engine_profile import fit_summary, machine_meta, profile_engine
from bench.fidelity.engine_run import ITERATION_LOG_ARG, RunningEngine, log, one_engine
from bench.fidelity.metrics import METRICS, Outcome, compare, from_sim, noise, summarize
from bench.fidelity.real import play
from bench.fidelity.saturation import real_saturation_rps, saturation_stream, sim_saturation_rps
from bench.fidelity.workload import Stream, build_stream
from demo.engine import DEFAULT_MODEL, ENGINE_VENV, EngineSpec, reset_prefix_caches
from sim.engine.measured import MeasuredProfile, load_profile
from sim.engine.openloop import run_open_loop
from sim.paths import default_trace


def parse_loads(text: str) -> list[float]:
    loads = [float(x) for x in text.split(",") if x.strip()]
    if not loads or any(not 0.0 < x < 1.5 for x in loads):
        raise argparse.ArgumentTypeError(f"loads must be fractions of saturation in (0, 1.5), got {text!r}")
    return loads


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench.fidelity.sim_fidelity", description=(__doc__ or "").splitlines()[0])
    p.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    p.add_argument("--engine-python", type=Path, default=ENGINE_VENV / "bin" / "python")
    p.add_argument("--trace", type=Path, default=None, help="trace CSV (default: the shared conv trace)")
    p.add_argument("--loads", type=parse_loads, default=[0.3, 0.6, 0.9])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--profile", type=Path, default=None,
                   help="measured profile to use if it exists, else where to write the fresh one")
    p.add_argument("--duration", type=float, default=90.0, help="seconds of arrivals per load")
    p.add_argument("--start", type=float, default=0.0, help="trace slice start (trace seconds)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reps", type=int, default=3, help="repetitions of each profile point (fresh profile)")
    p.add_argument("--repeat", type=float, action="append", default=[], help="play this load twice (noise)")
    p.add_argument("--probe", action="store_true", help="also measure saturation on the engine (a burst)")
    p.add_argument("--log-dir", type=Path, default=None)
    p.add_argument("--step-log", action="store_true",
                   help="engine logs every step (vLLM iteration details); summarized per load into the result")
    return p


def obtain_profile(args: argparse.Namespace, engine: RunningEngine) -> tuple[MeasuredProfile, Path]:
    path = args.profile or args.out.with_suffix(".profile.json")
    if args.profile is not None and args.profile.is_file():
        log(f"profile: {args.profile} (measured before)")
        return load_profile(args.profile), args.profile
    log("profile: measuring the engine first")
    profile = profile_engine(engine, args.reps, args.seed, machine_meta(args.engine_python))
    path.parent.mkdir(parents=True, exist_ok=True)
    profile.write(path)
    log(f"profile written to {path}\n{fit_summary(profile)}")
    return profile, path


def simulate(profile: MeasuredProfile, stream: Stream, arrivals: list[float], seed: int) -> dict[str, float]:
    """The simulator's metrics for ``stream`` sent at ``arrivals`` (the send times the engine saw)."""
    cfg = profile.engine_config(seed=seed)
    reqs = [dataclasses.replace(r, arrival_s=a) for r, a in zip(stream.sim_requests(cfg.block_size), arrivals,
                                                                strict=True)]
    return summarize(from_sim(run_open_loop(cfg, reqs, profile.fit.frontend_ms / 1e3)))


def play_on_engine(engine: RunningEngine, profile: MeasuredProfile, stream: Stream) -> dict[str, Any]:
    reset_prefix_caches([engine.url])
    load_avg = os.getloadavg()[0]
    started = time.monotonic()
    outcomes, late = asyncio.run(play(engine.url, stream, profile.engine.model.vocab))
    return {"outcomes": outcomes, "wall_s": round(time.monotonic() - started, 1),
            "send_late_ms": round(late * 1e3, 1), "load_avg_1m": round(load_avg, 2)}


def outcome_columns(outcomes: list[Outcome]) -> dict[str, list[float | None]]:
    """Per-request send time, TTFT, TPOT, E2E (s), kept so the simulator can be re-run against them."""
    return {"arrival_s": [round(o.arrival_s, 4) for o in outcomes], "ttft_s": [round(o.ttft_s, 4) for o in outcomes],
            "tpot_s": [None if o.tpot_s is None else round(o.tpot_s, 5) for o in outcomes],
            "e2e_s": [round(o.e2e_s, 4) for o in outcomes]}


def describe(load: float, stream: Stream, real: dict[str, float], sim: dict[str, float]) -> str:
    cells = " ".join(f"{m}={real[m]:.0f}/{sim[m]:.0f}" for m in METRICS if m != "throughput_rps")
    return (f"load {load:g} ({stream.rate_rps:.3f} req/s, {len(stream.requests)} requests): real/sim {cells} "
            f"throughput={real['throughput_rps']:.3f}/{sim['throughput_rps']:.3f}")


def saturation(args: argparse.Namespace, engine: RunningEngine, profile: MeasuredProfile,
               trace: Path) -> dict[str, Any]:
    burst_stream = saturation_stream(trace, profile.engine.max_model_len, args.start, args.seed)
    sat = sim_saturation_rps(profile.engine_config(seed=args.seed), profile.fit.frontend_ms / 1e3, burst_stream)
    out: dict[str, Any] = {"by": "profile", "rps": round(sat, 4), "requests": len(burst_stream.requests)}
    log(f"saturation by the profile: {sat:.3f} req/s ({len(burst_stream.requests)}-request burst, simulator)")
    if args.probe:
        reset_prefix_caches([engine.url])
        out["real_probe_rps"] = round(real_saturation_rps(engine.url, burst_stream, profile.engine.model.vocab), 4)
        log(f"saturation probe on the engine: {out['real_probe_rps']:.3f} req/s")
    return out


def run_loads(args: argparse.Namespace, engine: RunningEngine, profile: MeasuredProfile, trace: Path,
              sat_rps: float) -> dict[str, Any]:
    out: dict[str, Any] = {"rows": [], "loads": [], "noise": [], "noise_runs": []}
    first_real: dict[float, dict[str, float]] = {}
    for load in [*args.loads, *args.repeat]:
        stream = build_stream(trace, load * sat_rps, args.duration, profile.engine.max_model_len, args.start,
                              args.seed)
        run = play_on_engine(engine, profile, stream)
        outcomes = run.pop("outcomes")
        real = summarize(outcomes)
        info = {"load": load, "rate_rps": stream.rate_rps, "requests": len(stream.requests),
                "span_s": round(stream.span_s, 1), **run, "real": real, "outcomes": outcome_columns(outcomes)}
        if load in first_real:
            out["noise"] += noise(load, first_real[load], real)
            out["noise_runs"].append(info)
            log(f"load {load:g} again: " + " ".join(f"{r['metric']}={r['rel_diff']:+.1%}" for r in out["noise"][-10:]))
            continue
        first_real[load] = real
        sim = simulate(profile, stream, [o.arrival_s for o in outcomes], args.seed)
        log(describe(load, stream, real, sim))
        out["rows"] += compare(load, real, sim)
        out["loads"].append({**info, "sim": sim})
    return out


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if any(x not in args.loads for x in args.repeat):
        parser.error("--repeat must name one of --loads")
    trace = args.trace or default_trace()
    spec = EngineSpec(model_dir=args.model.resolve(), python=args.engine_python)
    command = " ".join(["python -m bench.fidelity.sim_fidelity", *(sys.argv[1:] if argv is None else argv)])
    extra = [ITERATION_LOG_ARG] if args.step_log else []
    with one_engine(spec, args.log_dir, extra) as engine:
        profile, profile_path = obtain_profile(args, engine)
        sat = saturation(args, engine, profile, trace)
        out = run_loads(args, engine, profile, trace, sat["rps"])
    settings = {"trace": str(trace), "duration_s": args.duration, "start_s": args.start, "seed": args.seed}
    out.update(command=command, settings=settings, saturation=sat,
               profile={"path": str(profile_path), "fit": profile.fit.to_json(), "meta": dict(profile.meta)},
               machine={"cores": os.cpu_count(), "load_avg_end": list(os.getloadavg())})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2))
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
