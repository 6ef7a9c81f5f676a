"""``python -m sim.calibrate``: step time vs batch tokens for each preset, next to the reference
points of ``shared/data/README.md`` (linear layers only: per-layer ops x layers, embedding once).

Columns: ``linear`` = profiled linear layers (one tensor-parallel shard); ``all-reduce`` = the two
per-layer all-reduces of a TP step; ``prefill step`` = whole step for one sequence prefilling N
tokens from an empty cache (adds attention FLOPs + CPU overhead); ``decode step`` = whole step for N
sequences decoding with 1,024 cached tokens each (adds KV reads); ``ref`` = the README's linear-only
reference point where one exists. A second table gives Llama-3-70B's linear layers at TP 1/2/4/8.
"""

from __future__ import annotations

import argparse
from typing import Any

from sim.engine.config import PRESETS, EngineConfig
from sim.engine.hardware import A100_LLAMA3_70B, LLAMA3_70B
from sim.engine.profile import linear_table
from sim.engine.steptime import StepTimeModel
from sim.paths import profile_path

TOKENS = (1, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
REFERENCE_MS: dict[str, dict[int, float]] = {
    "llama3-8b-a100": {1: 9.7, 16: 10.1, 512: 34.6, 2048: 146.0},
    "llama2-7b-h100": {1: 5.5, 64: 5.9, 512: 12.0, 2048: 40.0},
    "llama3-70b-a100-tp4": {1: 25.0, 512: 90.0, 2048: 341.0},
}
REFERENCE_SATURATION = {"llama3-8b-a100": "~15k tok/s", "llama2-7b-h100": "~50k tok/s"}
REFERENCE_70B_TP: dict[int, dict[int, float]] = {
    2: {1: 45.0, 512: 176.0, 2048: 648.0},
    4: {1: 25.0, 512: 90.0, 2048: 341.0},
    8: {1: 14.0, 512: 52.0, 2048: 187.0},
}
"""Llama-3-70B on A100, linear layers x80, per TP degree (shared/data/README.md)."""
TP_TOKENS = (1, 64, 512, 2048, 8192)
DECODE_CONTEXT = 1024


def _calibration_config(preset: str) -> EngineConfig:
    return EngineConfig.from_preset(preset, noise_std=0.0, max_num_batched_tokens=max(TOKENS))


def calibration_rows(preset: str) -> list[dict[str, Any]]:
    cfg = _calibration_config(preset)
    model = StepTimeModel(cfg)
    rows = []
    for n in TOKENS:
        decode = None
        if n <= cfg.max_num_seqs:
            decode = model.base_ms(n, n, 0.0, n * (DECODE_CONTEXT + 1))
        rows.append({
            "tokens": n,
            "linear_ms": model.linear_ms[n],
            "all_reduce_ms": model.comm_ms[n],
            "prefill_step_ms": model.base_ms(n, 1, n * n / 2.0, 0) if n > 1 else model.base_ms(1, 1, 0.0, 1),
            "decode_step_ms": decode,
            "ref_linear_ms": REFERENCE_MS.get(preset, {}).get(n),
        })
    return rows


def saturation_tok_s(preset: str) -> float:
    cfg = _calibration_config(preset)
    model = StepTimeModel(cfg)
    n = cfg.max_num_batched_tokens
    return n / model.linear_ms[n] * 1e3


def tp_rows() -> list[dict[str, Any]]:
    """Llama-3-70B linear-layer ms per step on A100 for TP 1/2/4/8 next to the README's points."""
    rows = []
    for tp in (1, 2, 4, 8):
        table = linear_table(profile_path(A100_LLAMA3_70B.file), LLAMA3_70B.n_layers, max(TP_TOKENS), tp)
        for n in TP_TOKENS:
            ref = REFERENCE_70B_TP.get(tp, {}).get(n)
            rows.append({"tp": tp, "tokens": n, "linear_ms": table[n], "ref_linear_ms": ref})
    return rows


def tp_markdown() -> str:
    out = ["#### Llama-3-70B linear layers on A100 by tensor-parallel degree (ms per step, x80 layers)\n",
           "| TP | " + " | ".join(f"{n} tok" for n in TP_TOKENS) + " |",
           "| ---: |" + " ---: |" * len(TP_TOKENS)]
    rows = tp_rows()
    for tp in (1, 2, 4, 8):
        cells = []
        for r in (r for r in rows if r["tp"] == tp):
            ref = r["ref_linear_ms"]
            cells.append(f"{r['linear_ms']:.1f}" + (f" (ref {ref:g})" if ref is not None else ""))
        out.append(f"| {tp} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def _fmt(x: float | None) -> str:
    return "" if x is None else f"{x:.1f}"


def markdown(presets: list[str]) -> str:
    out = []
    for preset in presets:
        cfg = EngineConfig.from_preset(preset)
        tp = cfg.tensor_parallel_size
        gpus = f"{tp} x {cfg.gpu.name} (TP {tp})" if tp > 1 else cfg.gpu.name
        out.append(f"#### {preset} ({cfg.model.name} on {gpus}, {cfg.num_gpu_blocks} KV blocks of "
                   f"{cfg.block_size} tokens = {cfg.kv_tokens:,} tokens, KV {cfg.model.kv_bytes_per_token // 1024} "
                   f"KiB/token)\n")
        out.append("| batch tokens | linear ms | ref linear ms | all-reduce ms | prefill step ms | "
                   "decode step ms (ctx 1024) |")
        out.append("| ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in calibration_rows(preset):
            out.append(f"| {r['tokens']} | {_fmt(r['linear_ms'])} | {_fmt(r['ref_linear_ms'])} | "
                       f"{_fmt(r['all_reduce_ms'])} | {_fmt(r['prefill_step_ms'])} | {_fmt(r['decode_step_ms'])} |")
        sat = saturation_tok_s(preset)
        out.append(f"\nLinear-layer saturation at {max(TOKENS)} tokens: {sat:,.0f} tok/s "
                   f"(README: {REFERENCE_SATURATION.get(preset, 'n/a')}).\n")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="sim.calibrate", description=__doc__.splitlines()[0] if __doc__ else "")
    p.add_argument("--preset", action="append", choices=sorted(PRESETS), help="default: all presets")
    args = p.parse_args(argv)
    print(markdown(args.preset or sorted(PRESETS, reverse=True)))
    if not args.preset:
        print(tp_markdown())


if __name__ == "__main__":
    main()
