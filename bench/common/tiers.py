"""The benchmark tiers: ``make bench`` (quick), ``make bench-full`` (full), ``make bench-engine`` (engine).

    python -m bench.common.tiers quick|full|engine [--list] [--only SUBSTRING]

* **quick** — the cheap entry points with cheap arguments; 7 min 12 s end to end on the 2-core machine (budget: 15).
* **full** — every other maintained offline benchmark, with the arguments its documented figures were taken with.
* **engine** — the benchmarks that need real vLLM engines (``make engine``'s ``.venv-engine``); the runner holds
  ``flock /tmp/engine.lock`` for the whole tier, as engine workloads on this machine run one at a time.

Each entry is a module run as ``python -m MODULE ARGV`` from the repository root, and the result file it leaves
under ``bench/results/<area>/``: either the module writes it (its ``--out`` / ``--write`` in ARGV, or its default)
or, for a module that only prints, the runner saves its stdout there (``stdout=True``). Entries run in order; a
failure is reported and the next entry runs; the exit status is 1 if any failed. ``minutes`` is the expected wall
time on the 2-core machine (recorded in the RESULTS files, BENCHMARKS.md or base results; else estimated).
Every module under ``bench/`` with ``if __name__ == "__main__"`` is in exactly one tier or in
:data:`NOT_IN_TIERS` (tests/bench/test_entry_points.py checks it).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.common.paths import REPO


@dataclass(frozen=True)
class Entry:
    module: str
    argv: tuple[str, ...]
    result: str
    """The result file, relative to the repository root (under ``bench/results/<area>/``)."""
    minutes: float
    stdout: bool = False
    """The module only prints: the runner saves its stdout as :attr:`result`."""

    @property
    def command(self) -> str:
        return " ".join(["python -m", self.module, *self.argv])


def _e(module: str, argv: str, result: str, minutes: float, stdout: bool = False) -> Entry:
    return Entry(f"bench.{module}", tuple(argv.split()), f"bench/results/{result}", minutes, stdout)


POLICIES = "round-robin,least-queue,least-kv,load-prefix,prefix-affinity,predicted-latency"
QUICK_BUDGET_MINUTES = 15.0

TIERS: dict[str, tuple[Entry, ...]] = {
    "quick": (
        _e("trainer.service", "--only retrain --out bench/results/trainer/service-retrain.md",
           "trainer/service-retrain.md", 1),
        _e("trainer.extrapolation", "--out bench/results/trainer/extrapolation.json", "trainer/extrapolation.json", 1),
        _e("predictor.service", "--rounds 2", "predictor/service.md", 3, stdout=True),
        _e("router.decision", "", "router/decision.md", 1, stdout=True),
        _e("pages.status_pages", "", "pages/status_pages.md", 2, stdout=True),
        _e("security.guards", "--only oversize", "security/guards-oversize.md", 1, stdout=True),
        _e("security.guards", "--only restart", "security/guards-restart.md", 1, stdout=True),
        _e("sim.simulator", "--write bench/results/sim/simulator.md", "sim/simulator.md", 3),
    ),
    "full": (
        _e("router.matrix", "--seeds 0,1 --jobs 2 --out bench/results/router/routing-matrix.json "
           "--plot bench/results/router/routing-matrix.png", "router/routing-matrix.json", 26),
        _e("router.replay", "--out bench/results/router/replay.json", "router/replay.json", 2),
        _e("router.drift", "--out bench/results/router/drift.json", "router/drift.json", 8),
        _e("pd.routing", "--traces conv --start 1200 --duration 600 --jobs 2 --out bench/results/pd/pd-conv.json "
           "--plot bench/results/pd/pd-conv.png", "pd/pd-conv.json", 2),
        _e("pd.routing", "--traces code --presets llama3-70b-a100-tp4 --slo-ttft-ms 4000 --start 1200 "
           "--duration 600 --jobs 2 --out bench/results/pd/pd-code70.json --plot bench/results/pd/pd-code70.png",
           "pd/pd-code70.json", 1),
        _e("pd.routing", "--traces code --presets llama3-8b-a100 --slo-ttft-ms 2000 --start 1200 --duration 600 "
           "--jobs 2 --out bench/results/pd/pd-code8.json --plot bench/results/pd/pd-code8.png", "pd/pd-code8.json", 1),
        _e("quality.suite", "--models trainer --out bench/results/quality/quality.json", "quality/quality.json", 10),
        _e("sim.dualpool", "--out bench/results/sim/dualpool.json --plot bench/results/sim/dualpool_compare.png",
           "sim/dualpool.json", 20),
        _e("scaling.fanout", "", "scaling/RESULTS-fanout.md", 6),
        _e("scaling.stack_rss", "", "scaling/stack_rss.md", 1.5, stdout=True),
        _e("predictor.openloop", "", "predictor/openloop.md", 8, stdout=True),
        _e("predictor.keepalive", "", "predictor/keepalive.md", 5, stdout=True),
        _e("predictor.against", "--against main --out bench/results/predictor/against.json",
           "predictor/against.json", 2),
        _e("proxy.http_client", "", "proxy/http_client.md", 2, stdout=True),
        _e("proxy.overhead", "", "proxy/RESULTS-proxy.md", 5),
        _e("trainer.learning_replay", "--suite bench/results/real_engine/learning-logs "
           "--out bench/results/trainer/learning-replay-default.json", "trainer/learning-replay-default.json", 5),
    ),
    "engine": (
        _e("fidelity.engine_profile", "--out bench/results/fidelity/engine_profile.json",
           "fidelity/engine_profile.json", 12),
        _e("fidelity.sim_fidelity", "--profile bench/results/fidelity/engine_profile.json --probe "
           "--out bench/results/fidelity/sim_fidelity.json", "fidelity/sim_fidelity.json", 11),
        _e("real_engine", "--engines 2 --trace ../shared/data/azure_llm_2023_conv.csv --rps 0.7 --duration 90 "
           f"--slo-ttft-ms 2500 --policy {POLICIES} --min-samples 10 --retrain-interval 2 "
           "--out bench/results/real_engine/real-engine-conv.json", "real_engine/real-engine-conv.json", 25),
        _e("real_engine", "--engines 2 --trace ../shared/data/azure_llm_2023_code.csv --trace-start 1380 --rps 0.25 "
           f"--duration 90 --slo-ttft-ms 4000 --policy {POLICIES} --min-samples 10 --retrain-interval 2 "
           "--out bench/results/real_engine/real-engine-code.json", "real_engine/real-engine-code.json", 22),
        _e("real_engine.noprofile", "--out bench/results/real_engine/noprofile-engine.json",
           "real_engine/noprofile-engine.json", 6),
    ),
}

NOT_IN_TIERS: dict[str, str] = {
    "bench.common.tiers": "this runner",
    "bench.predictor.baseline": "the naive predictor server bench.predictor.service starts as its baseline",
    "bench.sim.pod": "the pod-server section of bench.sim.simulator (alone: other stream counts and time scales)",
    "bench.sim.scenarios": "the scenario sections of bench.sim.simulator (alone: another rate or length)",
    "bench.router.matrix_report": "prints the tables of a bench.router.matrix result file again",
    "bench.real_engine.table": "prints the table of a bench.real_engine result file",
    "bench.quality.compare": "compares two bench.quality.suite result files",
    "bench.trainer.hindsight": "judges the work directories of a make demo batch (bench/results/demo/demo-seeds.md), "
                               "which no tier keeps",
}
"""Entry points that are not benchmarks of their own, and what they are (each belongs to one in a tier)."""

ENGINE_LOCK = Path("/tmp/engine.lock")


@contextmanager
def engine_lock() -> Iterator[None]:
    """``flock /tmp/engine.lock`` for the engine tier (the same lock the documented engine commands take)."""
    with ENGINE_LOCK.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for {ENGINE_LOCK} (another engine workload holds it) ...", flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def run_entry(entry: Entry) -> int:
    """Run one entry from the repository root; its output goes to the terminal (and to its result file when the
    module only prints: written only if the module succeeds)."""
    cmd = [sys.executable, "-m", entry.module, *entry.argv]
    result = REPO / entry.result
    result.parent.mkdir(parents=True, exist_ok=True)
    if not entry.stdout:
        return subprocess.call(cmd, cwd=REPO)
    partial = result.with_name(result.name + ".partial")
    with partial.open("wb") as sink, subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()
            sink.write(line)
    if proc.returncode == 0:
        partial.replace(result)
    else:
        partial.unlink()
    return proc.returncode


def run_tier(name: str, entries: Sequence[Entry]) -> int:
    failed: list[str] = []
    took: list[tuple[Entry, float, int]] = []
    for i, entry in enumerate(entries, 1):
        print(f"\n== [{name} {i}/{len(entries)}] {entry.command}  -> {entry.result} (expected ~{entry.minutes:g} min;"
              f" load {' '.join(f'{x:.2f}' for x in os.getloadavg())})", flush=True)
        t0 = time.monotonic()
        code = run_entry(entry)
        took.append((entry, (time.monotonic() - t0) / 60, code))
        if code != 0:
            failed.append(entry.command)
    print(f"\n== {name} tier done")
    for entry, minutes, code in took:
        print(f"  {'ok ' if code == 0 else 'FAILED'} {minutes:5.1f} min  {entry.command}  -> {entry.result}")
    if failed:
        print("failed:\n  " + "\n  ".join(failed))
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.common.tiers", description=(__doc__ or "").splitlines()[0])
    p.add_argument("tier", choices=list(TIERS))
    p.add_argument("--list", action="store_true", help="print the tier's entries (commands, result files) and exit")
    p.add_argument("--only", action="append", default=[], metavar="SUBSTRING",
                   help="run only the entries whose module contains SUBSTRING (repeatable)")
    args = p.parse_args(argv)
    entries = [e for e in TIERS[args.tier] if not args.only or any(s in e.module for s in args.only)]
    if args.list:
        total = sum(e.minutes for e in entries)
        print(f"{args.tier}: {len(entries)} entries, ~{total:g} min expected on 2 cores")
        for e in entries:
            print(f"  ~{e.minutes:g} min  {e.command}  -> {e.result}{' (stdout)' if e.stdout else ''}")
        return 0
    if args.tier == "engine":
        with engine_lock():
            return run_tier(args.tier, entries)
    return run_tier(args.tier, entries)


if __name__ == "__main__":
    raise SystemExit(main())
