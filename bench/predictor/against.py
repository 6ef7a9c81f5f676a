"""Predictor bulk-100 latency of this checkout against another revision, each serving its own trainer's bundle.

    python -m bench.predictor.against --against a28d46d [--rounds 6] [--duration 3]

Each tree (this checkout, and a detached ``git worktree`` of ``--against``, removed afterwards) fits a bundle exactly
as its trainer publishes it (``trainer_bundle`` of ``bench.predictor.service``, or of that module's old path in a
revision from before the by-area layout: default settings, 50,000 synthetic rows per model) and serves it with its
own predictor (``python -m predictor --bundle-dir``); ``wrk`` then posts the same 100-row ``/predict/bulk/strict``
body to each in alternating rounds (one connection, keep-alive), so load from other processes hits both alike.
Prints per tree the median p50 / p99 over rounds and the p50 ratio checkout ÷ against per round (its median is the
figure). The trees' bundles differ as their fits do (this is what a router sees).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

from bench.common import results
from bench.common.paths import REPO
from bench.common.procstat import free_port
from bench.common.prodenv import production_python
from bench.common.worktree import remove, worktree
from bench.predictor.service import rows, server, wrk

BUNDLE_MODULES = (("bench", "predictor", "service"), ("bench", "bench_predictor"))
"""Where ``trainer_bundle`` lives (module path parts), newest layout first: revisions before bench/ was split by
area have only the second."""
BUNDLE_SCRIPT = ("import importlib, sys; from pathlib import Path; "
                 "print(importlib.import_module(sys.argv[1]).trainer_bundle(Path(sys.argv[2])))")
"""Runs inside the other revision's tree: it may import only what that revision has (no module of this one)."""


def bundle_module(tree: Path) -> str:
    """The first of :data:`BUNDLE_MODULES` that ``tree`` (this checkout or another revision's worktree) has."""
    for parts in BUNDLE_MODULES:
        if tree.joinpath(*parts[:-1], parts[-1] + ".py").is_file():
            return ".".join(parts)
    raise FileNotFoundError(f"{tree}: no module with trainer_bundle in this revision")


def bundle_of(tree: Path, work: Path) -> Path:
    """The bundle root ``tree``'s own trainer publishes (fitted in a subprocess of that tree)."""
    done = subprocess.run([sys.executable, "-c", BUNDLE_SCRIPT, bundle_module(tree), str(work)], cwd=tree,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(tree)}, check=True,
                          timeout=1800)
    return Path(done.stdout.strip().splitlines()[-1])


def measure(trees: dict[str, Path], rounds: int, duration: float, tmp: Path) -> dict[str, list[dict[str, float]]]:
    body = orjson.dumps({"requests": rows(100, seed=5)})
    out: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory(dir=tmp) as work:
        roots = {name: bundle_of(tree, Path(work) / name) for name, tree in trees.items()}
        ports = {name: free_port() for name in trees}
        servers = [_served(trees[name], roots[name], ports[name]) for name in trees]
        try:
            for r in range(rounds):
                order = list(trees) if r % 2 == 0 else list(reversed(trees))
                for name in order:
                    url = f"http://127.0.0.1:{ports[name]}/predict/bulk/strict"
                    out[name].append(wrk(url, body, 1, duration, Path(work)))
        finally:
            for server in servers:
                server.__exit__(None, None, None)
    return out


def _served(tree: Path, root: Path, port: int) -> Any:
    """``tree``'s predictor (its own code: started in that tree) on ``root``; a context manager already entered."""
    cm = server([production_python(), "-m", "predictor", "--host", "127.0.0.1", "--port", str(port), "--bundle-dir",
                 str(root)], port, {"PREDICT_LONG_POLL": "false", "PYTHONPATH": str(tree)}, cwd=tree)
    cm.__enter__()
    return cm


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="bench.predictor.against", description=(__doc__ or "").splitlines()[0])
    p.add_argument("--against", required=True, metavar="REV")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--duration", type=float, default=3.0)
    p.add_argument("--out", type=Path, default=None, help="also write the figures as JSON")
    args = p.parse_args(argv)
    recording = results.Run("predictor-against")
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-pred-against-") as tmp:
        trees = {"checkout": REPO, args.against: worktree(args.against, Path(tmp))}
        try:
            measured = measure(trees, args.rounds, args.duration, Path(tmp))
        finally:
            remove(trees[args.against])
    ratios = [a["p50"] / b["p50"] for a, b in zip(measured["checkout"], measured[args.against], strict=True)]
    print(f"predictor strict-100 p50, checkout vs {args.against}, each serving its own trainer's bundle; "
          f"{args.rounds} alternating rounds x {args.duration:g} s, wrk c1 (machine: 2 cores, load {load:.1f} -> "
          f"{os.getloadavg()[0]:.1f})")
    print("| tree | p50 ms (median; min-max) | p99 ms (median) |\n|---|--:|--:|")
    for name, res in measured.items():
        p50 = [r["p50"] for r in res]
        print(f"| {name} | {statistics.median(p50):.3f} ({min(p50):.3f}-{max(p50):.3f}) | "
              f"{statistics.median(r['p99'] for r in res):.3f} |")
    print(f"\np50 ratio checkout / {args.against} per round: {', '.join(f'{r:.2f}' for r in ratios)}; median "
          f"{statistics.median(ratios):.3f}")
    if args.out is not None:
        recording.write(args.out, {"against": args.against, "rounds": args.rounds, "duration_s": args.duration},
                        {"rounds": measured, "ratios": ratios, "median_ratio": statistics.median(ratios)}, indent=2)


if __name__ == "__main__":
    main()
