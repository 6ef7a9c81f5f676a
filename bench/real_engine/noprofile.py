"""``python -m bench.real_engine.noprofile --out F.json``: cold start on a model no profile was measured for.

Builds a tiny Llama whose dimensions have no simulator profile (hidden 384, 6 layers: 16.6 M parameters) under
``.venv-engine/models/noprofile`` when it is not there, then replays conv at 0.3 req/s for 180 s onto two real
engines with predicted latency and the trainer's default settings (retrain every 10 s, 100 rows before a tree fit).
The questions: how soon a trained bundle replaces the prior, and the served p90 coverage after 60 s.
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

from bench.common.paths import REPO
from bench.real_engine.__main__ import main as replay
from demo.engine import ENGINE_VENV

MODEL = REPO / ".venv-engine" / "models" / "noprofile"
SHAPE = ("--hidden", "384", "--layers", "6", "--heads", "6", "--kv-heads", "2", "--seed", "3")
REPLAY = ("--engines", "2", "--trace", str(REPO.parent / "shared" / "data" / "azure_llm_2023_conv.csv"),
          "--rps", "0.3", "--duration", "180", "--policy", "predicted-latency", "--min-samples", "100",
          "--retrain-interval", "10")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.real_engine.noprofile", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True, help="results JSON (plot and per-request CSV beside it)")
    p.add_argument("--model", type=Path, default=MODEL, help="where the model is built (kept between runs)")
    args = p.parse_args(argv)
    if not (args.model / "config.json").is_file():
        # ~10 s; torch, transformers and tokenizers live in the engine's virtualenv only
        subprocess.run([str(ENGINE_VENV / "bin" / "python"), "-m", "demo.tiny_model", "--out", str(args.model), *SHAPE],
                       cwd=REPO, check=True, timeout=600)
    return replay(["--model", str(args.model), *REPLAY, "--out", str(args.out)])


if __name__ == "__main__":
    raise SystemExit(main())
