"""Run every benchmark in bench/ in turn (``make bench``); each prints its own table."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

BENCHES = ("bench.bench_trainer", "bench.bench_predictor", "bench.bench_sim", "bench.bench_router",
           "bench.bench_proxy", "bench.bench_http_client", "bench.bench_predictor_openloop", "bench.bench_stack_rss",
           "bench.bench_security", "bench.bench_dualpool", "bench.bench_pages", "bench.bench_keepalive")


def main() -> int:
    failed = []
    for module in BENCHES:
        if importlib.util.find_spec(module) is None:
            print(f"== {module}: not present", flush=True)
            continue
        print(f"== {module}", flush=True)
        if subprocess.call([sys.executable, "-m", module]) != 0:
            failed.append(module)
    if failed:
        print("failed:", ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
