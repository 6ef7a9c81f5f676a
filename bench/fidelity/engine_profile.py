"""``python -m bench.fidelity.engine_profile``: measure a real engine's step times and write a simulator profile.

    flock /tmp/engine.lock .venv/bin/python -m bench.fidelity.engine_profile --model .venv-engine/models/tiny-llama \\
        --out bench/out/tiny-profile.json

Starts one engine (one core), measures prefill TTFT and decode TPOT grids (:mod:`bench.fidelity.profile_measure`),
fits the simulator's step model to them (:mod:`sim.engine.measured_fit`) and writes the raw points, the
engine's shape and the fit as JSON (:mod:`sim.engine.measured`). ``python -m sim.replay --profile FILE`` and
``MeasuredProfile.engine_config()`` run the simulator from that file alone. Progress and a residual
table go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import time
from pathlib import Path
from typing import Any

from bench.fidelity.engine_run import RunningEngine, log, one_engine
from bench.fidelity.engine_stream import engine_client, stream_completion
from bench.fidelity.profile_measure import Prompts, measure
from demo.engine import DEFAULT_MODEL, ENGINE_VENV, EngineSpec
from sim.engine.measured import MeasuredProfile
from sim.engine.measured_fit import fit_points, predicted_ms

WARMUP_REQUESTS = 4


def machine_meta(engine_python: Path) -> dict[str, Any]:
    installed = engine_python.parent.parent / ".installed"
    return {
        "cores": os.cpu_count(), "cpu": platform.processor() or platform.machine(),
        "load_avg_start": list(os.getloadavg()),
        "engine": installed.read_text().strip() if installed.is_file() else "",
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


async def warm_up(url: str, vocab: int) -> None:
    """A few requests so first-call costs (allocations, lazy imports) stay out of the points."""
    prompts = Prompts(vocab, seed=-1)
    async with engine_client() as client:
        for n in (16, 512, 2048, 16)[:WARMUP_REQUESTS]:
            await stream_completion(client, url, prompts.ids(n), 8)


def profile_engine(engine: RunningEngine, reps: int, seed: int, meta: dict[str, Any]) -> MeasuredProfile:
    vocab = engine.shape.model.vocab
    asyncio.run(warm_up(engine.url, vocab))
    started = time.monotonic()
    prefill, decode = asyncio.run(measure(engine.url, vocab, reps, seed, engine.shape.kv_tokens))
    meta = {**meta, "measure_s": round(time.monotonic() - started, 1), "load_avg_end": list(os.getloadavg()),
            "reps": reps}
    fit = fit_points(prefill, decode, engine.shape.max_num_batched_tokens)
    return MeasuredProfile(engine.shape, tuple(prefill), tuple(decode), fit, meta)


def residual_table(profile: MeasuredProfile) -> str:
    pred = predicted_ms(profile.fit, profile.prefill, profile.decode, profile.engine.max_num_batched_tokens)
    lines = ["point | measured ms (median) | fit ms | error"]
    labels = [f"prefill {p.tokens} @ ctx {p.context}" for p in profile.prefill]
    labels += [f"decode batch {d.batch} @ ctx {d.context:.0f}"
               + ("" if d.unique_kv is None or d.unique_kv >= d.batch * d.context * 0.99 else " (shared base)")
               for d in profile.decode]
    measured = [sorted(p.ttft_ms)[len(p.ttft_ms) // 2] for p in profile.prefill]
    measured += [sorted(d.tpot_ms)[len(d.tpot_ms) // 2] for d in profile.decode]
    for label, m, f in zip(labels, measured, pred, strict=True):
        lines.append(f"{label} | {m:.1f} | {f:.1f} | {(f - m) / m:+.1%}")
    return "\n".join(lines)


def fit_summary(profile: MeasuredProfile) -> str:
    f = profile.fit
    knots = ", ".join(f"{t}:{ms:.1f}" for t, ms in f.knots)
    return (f"fit: frontend {f.frontend_ms:.2f} ms, overhead {f.overhead_ms:.2f} ms/step, per seq "
            f"{f.per_seq_ms:.3f} ms, prefill attention {f.prefill_ms_per_qk * 1e6:.2f} ms per 1e6 q*kv, decode "
            f"attention {f.decode_ms_per_kv_token * 1e3:.3f} ms per 1k cached tokens + "
            f"{f.decode_ms_per_unique_kv_token * 1e3:.3f} ms per 1k distinct ones, noise {f.noise_std:.3f}, "
            f"rel RMSE {f.rel_rmse:.1%}\ntoken_ms knots (tokens:ms): {knots}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="bench.fidelity.engine_profile", description=(__doc__ or "").splitlines()[0])
    p.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="model directory (HF layout)")
    p.add_argument("--engine-python", type=Path, default=ENGINE_VENV / "bin" / "python")
    p.add_argument("--out", type=Path, required=True, help="profile JSON to write")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-dir", type=Path, default=None, help="engine log directory (default: a temp dir)")
    args = p.parse_args(argv)
    spec = EngineSpec(model_dir=args.model.resolve(), python=args.engine_python)
    meta = machine_meta(args.engine_python)
    with one_engine(spec, args.log_dir) as engine:
        profile = profile_engine(engine, args.reps, args.seed, meta)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    profile.write(args.out)
    log(residual_table(profile))
    log(fit_summary(profile))
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
