"""Decision overhead of the router-client library, excluding the predictor call.

``python -m bench.router.decision [--pods 16] [--decisions 20000]``

Times ``Router.decide`` end to end (classifier, prefix hashing of a ~4 KB prompt, 16 feature rows
from the snapshot, per-pod correction, scheduling pipeline, in-flight + prefix bookkeeping) with the
predictor step answered in-process, plus ``on_complete`` (sample queued, per-pod correction and drift
update, EMA/history). Baselines in the same run: predictions without the per-pod correction, and the
composite fallback path (no predictor at all).

``python -m bench.router.decision --against 09b6cf2 [--against REV ...] [--rounds 8] [--decisions 4000]``
compares this checkout with other revisions on the same machine in the same run: each revision is checked out
as a detached ``git worktree`` in a temporary directory (removed at the end), and every round runs this file
once per tree (a subprocess with that tree first on ``sys.path``; the order rotates per
round). Per tree and path the table gives the median over rounds of the round's p50 — wall time and the
thread's CPU time, which a shared machine inflates less — and the median over rounds of the p50 ratio to the
first ``--against`` tree in the same round (09b6cf2: the first release). Revisions without a per-pod correction
compare both predictions paths with their one; their stand-in predictor answers plain tuples, as theirs did.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

from router_client.config import RouterConfig
from router_client.predictor_client import Prediction
from router_client.router import RequestInfo, Router

NAMED_PREDICTIONS = hasattr(Prediction, "_fields")
"""False in revisions whose predictions were plain ``(ttft, tpot)`` pairs (``Prediction = tuple[float, float]``):
their stand-in answers with plain tuples, as their own benchmark did."""
SYSTEM = "You are a helpful assistant for a retail bank. Answer briefly and cite the policy. " * 12
HAS_CORRECTION = "correction" in RouterConfig.model_fields


class InstantPredictions(Router):
    """The predictor call replaced by an in-process answer, so only the library is timed."""

    async def _predict(self, pool: str, rows: list[Any],
                       started: float) -> tuple[list[Prediction] | None, str | None]:
        if not NAMED_PREDICTIONS:
            return [(50.0 + 20.0 * float(r["num_request_running"]) + float(r["num_request_waiting"]),  # type: ignore[misc]
                     10.0 + float(r["num_request_running"])) for r in rows], None
        new = tuple.__new__  # the Prediction the client's parser builds, without its Python-level __new__
        return [new(Prediction, (50.0 + 20.0 * float(r["num_request_running"]) + float(r["num_request_waiting"]),
                                 10.0 + float(r["num_request_running"]), None, None)) for r in rows], None


def _config(pods: int, predictors: bool, correction: bool = True) -> RouterConfig:
    urls = [f"http://127.0.0.1:{20000 + i}" for i in range(pods)]
    return RouterConfig.model_validate({
        "pools": [{"name": "short", "pods": urls, "max_context": 8192, "trainer_url": "http://127.0.0.1:1",
                   "predictor_urls": ["http://127.0.0.1:1"] if predictors else []}],
        "scheduler": {"seed": 1}, "scraper": {"interval_s": 1000.0}, "reporter": {"flush_interval_s": 1000.0},
        **({"correction": {"enabled": correction}} if HAS_CORRECTION else {})})


def _info(i: int) -> RequestInfo:
    return RequestInfo("/v1/chat/completions", 4200, None, 128, SYSTEM + f"user {i % 50}: question {i}",
                       f"sys{i % 4}", 500.0, None, False, f"r{i}")


class Timings(NamedTuple):
    decide_us: list[float]
    decide_cpu_us: list[float]
    complete_us: list[float]


async def _measure(router: Router, n: int, in_flight: int) -> Timings:
    out = Timings([], [], [])
    window = []
    for i in range(n):
        c0, t0 = time.thread_time(), time.perf_counter()
        d = await router.decide(_info(i))
        t1, c1 = time.perf_counter(), time.thread_time()
        out.decide_us.append((t1 - t0) * 1e6)
        out.decide_cpu_us.append((c1 - c0) * 1e6)
        window.append(d)
        if len(window) > in_flight:
            old = window.pop(0)
            t2 = time.perf_counter()
            router.on_first_token(old)
            router.on_complete(old, 120.0, 1400.0, 100, 1000)
            out.complete_us.append((time.perf_counter() - t2) * 1e6)
    return out


def _pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]


async def run(pods: int, n: int) -> list[tuple[str, list[float], list[float]]]:
    """(path, wall µs, CPU µs) per decision or completion of each path."""
    out = []
    for label, cls, predictors, correction in (
            ("decide, predictions (instant)", InstantPredictions, True, True),
            ("decide, predictions, correction off", InstantPredictions, True, False),
            ("decide, composite fallback (baseline)", Router, False, True)):
        if not correction and not HAS_CORRECTION:
            continue
        router = cls(_config(pods, predictors, correction))
        await router.start()
        await _measure(router, 2000, 64)  # warm-up
        t = await _measure(router, n, 64)
        await router.aclose()
        out.append((label, t.decide_us, t.decide_cpu_us))
        if predictors:
            out.append(("on_complete" + ("" if correction else ", correction off"), t.complete_us, []))
    return out


# -- the same run against other revisions -------------------------------------------------------
_WITHOUT_CORRECTION = {"decide, predictions, correction off": "decide, predictions (instant)",
                       "on_complete, correction off": "on_complete"}
"""A baseline without a per-pod correction has only the predictions path: the correction-off one compares with it."""


def _worker(tree: Path, pods: int, n: int) -> dict[str, dict[str, float]]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", "--pods", str(pods),
                           "--decisions", str(n)], env=env, cwd=tree, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, check=True, timeout=1800)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def compare(revs: list[str], rounds: int, pods: int, n: int) -> None:
    # Imported here, not at the top: the workers run this file by path inside old revisions' trees (PYTHONPATH =
    # that tree), where bench.common does not exist; only this parent process needs it.
    from bench.common.paths import REPO
    from bench.common.worktree import remove, worktree

    with tempfile.TemporaryDirectory(prefix="bench-router-") as tmp:
        trees = [("this checkout", REPO)] + [(rev, worktree(rev, Path(tmp))) for rev in revs]
        results: dict[str, list[dict[str, dict[str, float]]]] = {name: [] for name, _ in trees}
        try:
            for r in range(rounds):
                for name, tree in trees[r % len(trees):] + trees[:r % len(trees)]:
                    results[name].append(_worker(tree, pods, n))
                print(f"round {r + 1}/{rounds} done, load average {os.getloadavg()[0]:.1f}", file=sys.stderr)
        finally:
            for _, tree in trees[1:]:
                remove(tree)
    base = revs[0]
    print(f"router_client decision overhead vs {', '.join(revs)}: {pods} pods, {n} decisions per round, {rounds} "
          f"rounds, load average {os.getloadavg()[0]:.1f} at the end (machine: 2 cores)")
    print("| tree | path | p50 µs (median of rounds; min–max) | CPU p50 µs | p50 ÷ " + base + " |")
    print("|---|---|--:|--:|--:|")
    for name, _ in trees:
        for path in results[name][0]:
            p50 = [res[path]["p50"] for res in results[name]]
            cpu = [res[path]["cpu_p50"] for res in results[name] if "cpu_p50" in res[path]]
            ratios = [mine[path]["p50"] / theirs[their]["p50"]
                      for mine, theirs in zip(results[name], results[base], strict=True)
                      if (their := path if path in theirs else _WITHOUT_CORRECTION.get(path, "")) in theirs]
            cpu_text = f"{statistics.median(cpu):.1f}" if cpu else "–"
            ratio_text = f"{statistics.median(ratios):.2f}" if ratios else "–"
            print(f"| {name} | {path} | {statistics.median(p50):.1f} ({min(p50):.1f}–{max(p50):.1f}) | {cpu_text} | "
                  f"{ratio_text} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pods", type=int, default=16)
    p.add_argument("--decisions", type=int, default=None, help="per path (default 20000; 4000 per round with "
                   "--against)")
    p.add_argument("--against", action="append", default=[], metavar="REV",
                   help="git revision to compare with in the same run (repeatable; the first is the baseline)")
    p.add_argument("--rounds", type=int, default=8, help="rounds with --against")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.against:
        compare(args.against, args.rounds, args.pods, args.decisions or 4000)
        return
    rows = asyncio.run(run(args.pods, args.decisions or 20000))
    if args.worker:
        print(json.dumps({label: {"p50": _pct(xs, 0.5), **({"cpu_p50": _pct(cpu, 0.5)} if cpu else {})}
                          for label, xs, cpu in rows}))
        return
    print(f"router_client decision overhead, {args.pods} pods, {args.decisions or 20000} decisions "
          "(machine: 2 cores)")
    print(f"| {'path':<40} | p50 µs | p90 µs | p99 µs | mean µs | CPU p50 µs |")
    print(f"|{'-' * 42}|-------:|-------:|-------:|--------:|-----------:|")
    for label, xs, cpu in rows:
        cpu50 = f"{_pct(cpu, 0.5):10.1f}" if cpu else f"{'–':>10}"
        print(f"| {label:<40} | {_pct(xs, 0.5):6.1f} | {_pct(xs, 0.9):6.1f} | {_pct(xs, 0.99):6.1f} "
              f"| {statistics.fmean(xs):7.1f} | {cpu50} |")


if __name__ == "__main__":
    main()
