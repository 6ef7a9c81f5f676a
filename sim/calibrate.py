"""``python -m sim.calibrate``: step time vs batch tokens for each preset, next to the reference
points of ``shared/data/README.md`` (linear layers only, x32 layers).

Columns: ``linear`` = profiled linear layers; ``prefill step`` = whole step for one sequence
prefilling N tokens from an empty cache (adds attention FLOPs + CPU overhead); ``decode step`` =
whole step for N sequences decoding with 1,024 cached tokens each (adds KV reads); ``ref`` = the
README's linear-only reference point where one exists.
"""

from __future__ import annotations

import argparse
from typing import Any

from sim.engine.config import PRESETS, EngineConfig
from sim.engine.steptime import StepTimeModel

TOKENS = (1, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
REFERENCE_MS: dict[str, dict[int, float]] = {
    "llama3-8b-a100": {1: 9.7, 16: 10.1, 512: 34.6, 2048: 146.0},
    "llama2-7b-h100": {1: 5.5, 64: 5.9, 512: 12.0, 2048: 40.0},
}
REFERENCE_SATURATION = {"llama3-8b-a100": "~15k tok/s", "llama2-7b-h100": "~50k tok/s"}
DECODE_CONTEXT = 1024


def calibration_rows(preset: str) -> list[dict[str, Any]]:
    cfg = EngineConfig.from_preset(preset, noise_std=0.0)
    model = StepTimeModel(cfg)
    rows = []
    for n in TOKENS:
        decode = None
        if n <= cfg.max_num_seqs:
            decode = model.base_ms(n, n, 0.0, n * (DECODE_CONTEXT + 1))
        rows.append({
            "tokens": n,
            "linear_ms": model.linear_ms[n],
            "prefill_step_ms": model.base_ms(n, 1, n * n / 2.0, 0) if n > 1 else model.base_ms(1, 1, 0.0, 1),
            "decode_step_ms": decode,
            "ref_linear_ms": REFERENCE_MS.get(preset, {}).get(n),
        })
    return rows


def saturation_tok_s(preset: str) -> float:
    cfg = EngineConfig.from_preset(preset, noise_std=0.0)
    model = StepTimeModel(cfg)
    n = cfg.max_num_batched_tokens
    return n / model.linear_ms[n] * 1e3


def _fmt(x: float | None) -> str:
    return "" if x is None else f"{x:.1f}"


def markdown(presets: list[str]) -> str:
    out = []
    for preset in presets:
        cfg = EngineConfig.from_preset(preset)
        out.append(f"#### {preset} ({cfg.model.name} on {cfg.gpu.name}, {cfg.num_gpu_blocks} KV blocks of "
                   f"{cfg.block_size} tokens, KV {cfg.model.kv_bytes_per_token // 1024} KiB/token)\n")
        out.append("| batch tokens | linear ms | ref linear ms | prefill step ms | "
                   "decode step ms (ctx 1024) |")
        out.append("| ---: | ---: | ---: | ---: | ---: |")
        for r in calibration_rows(preset):
            out.append(f"| {r['tokens']} | {_fmt(r['linear_ms'])} | {_fmt(r['ref_linear_ms'])} | "
                       f"{_fmt(r['prefill_step_ms'])} | {_fmt(r['decode_step_ms'])} |")
        sat = saturation_tok_s(preset)
        out.append(f"\nLinear-layer saturation at {cfg.max_num_batched_tokens} tokens: {sat:,.0f} tok/s "
                   f"(README: {REFERENCE_SATURATION.get(preset, 'n/a')}).\n")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="sim.calibrate", description=__doc__.splitlines()[0] if __doc__ else "")
    p.add_argument("--preset", action="append", choices=sorted(PRESETS), help="default: all presets")
    args = p.parse_args(argv)
    print(markdown(args.preset or sorted(PRESETS, reverse=True)))


if __name__ == "__main__":
    main()
