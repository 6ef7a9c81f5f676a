"""``python -m bench.fidelity_steps --log ENGINE_LOG --profile P``: the engine's own step times against the profile.

    .venv/bin/python -m bench.sim_fidelity ... --step-log --log-dir DIR   # vLLM logs every step
    .venv/bin/python -m bench.fidelity_steps --log DIR/bench-engine.log --profile bench/out/tiny-profile.json

Reads vLLM's iteration lines (``--enable-logging-iteration-details``: context / generation requests and tokens,
elapsed ms, KV cache usage) and prices every step with the profile's step formula, the way the simulator
would: batch tokens and sequences as logged, the decodes' cached tokens taken from the KV usage (blocks in use
x block size: every in-use token read once, as the distinct-token term counts them), a prefill chunk priced
as if it had no cached context (the log does not say). Prints real vs formula medians per kind of step.
"""

from __future__ import annotations

import argparse
import re
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from sim.engine.measured import MeasuredProfile, load_profile

LINE = re.compile(r"Iteration\(\d+\): (\d+) context requests, (\d+) context tokens, (\d+) generation requests, "
                  r"(\d+) generation tokens, iteration elapsed time: ([\d.]+) ms.*KV cache usage: ([\d.]+)%")
BATCH_BINS = ((1, 3), (4, 15), (16, 63), (64, 1 << 20))


@dataclass(frozen=True)
class LoggedStep:
    ctx_requests: int
    ctx_tokens: int
    gen_requests: int
    gen_tokens: int
    elapsed_ms: float
    kv_usage: float

    @property
    def kind(self) -> str:
        if self.ctx_requests and self.gen_requests:
            return "prefill + decodes (mixed)"
        if self.ctx_requests:
            return "prefill only"
        lo, hi = next(b for b in BATCH_BINS if b[0] <= self.gen_requests <= b[1])
        return f"decode only, batch {lo}-{hi}" if hi < 1 << 20 else f"decode only, batch {lo}+"


def parse(lines: Iterable[str]) -> Iterator[LoggedStep]:
    for line in lines:
        m = LINE.search(line)
        if m is not None:
            a, b, c, d, ms, kv = m.groups()
            yield LoggedStep(int(a), int(b), int(c), int(d), float(ms), float(kv) / 100.0)


def formula_ms(profile: MeasuredProfile, step: LoggedStep, table: tuple[float, ...] | None = None) -> float:
    """The profile's step formula for ``step`` (``table``: the fit's token table, when the caller has one)."""
    fit, shape = profile.fit, profile.engine
    tokens = step.ctx_tokens + step.gen_tokens
    if table is None or tokens >= len(table):
        table = fit.token_ms_table(max(tokens, shape.max_num_batched_tokens))
    kv = step.kv_usage * shape.num_blocks * shape.block_size if step.gen_requests else 0.0
    per_chunk = step.ctx_tokens / max(step.ctx_requests, 1)
    return (fit.overhead_ms + fit.per_seq_ms * (step.ctx_requests + step.gen_requests) + table[tokens]
            + fit.prefill_ms_per_qk * step.ctx_tokens * per_chunk / 2.0
            + (fit.decode_ms_per_kv_token + fit.decode_ms_per_unique_kv_token) * kv)


def table(profile: MeasuredProfile, steps: list[LoggedStep]) -> str:
    kinds: dict[str, list[tuple[float, float]]] = {}
    tokens = profile.fit.token_ms_table(profile.engine.max_num_batched_tokens)
    for s in steps:
        kinds.setdefault(s.kind, []).append((s.elapsed_ms, formula_ms(profile, s, tokens)))
    lines = ["| logged steps | n | real p50 (ms) | profile formula p50 | real / formula (p50 of ratios) |",
             "|---|--:|--:|--:|--:|"]
    for kind in sorted(kinds):
        pairs = kinds[kind]
        real = statistics.median(r for r, _ in pairs)
        model = statistics.median(f for _, f in pairs)
        ratio = statistics.median(r / f for r, f in pairs if f > 0)
        lines.append(f"| {kind} | {len(pairs)} | {real:.1f} | {model:.1f} | {ratio:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="bench.fidelity_steps", description=(__doc__ or "").splitlines()[0])
    p.add_argument("--log", type=Path, required=True, help="engine log written with --step-log")
    p.add_argument("--profile", type=Path, required=True)
    args = p.parse_args(argv)
    with args.log.open(encoding="utf-8", errors="replace") as f:
        steps = list(parse(f))
    if not steps:
        raise SystemExit(f"{args.log}: no iteration lines (run the engine with --step-log)")
    print(table(load_profile(args.profile), steps))


if __name__ == "__main__":
    main()
