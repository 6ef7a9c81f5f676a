"""Run every benchmark in bench/ in turn (``make bench``); each prints its own table."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

BENCHES = ("bench.trainer.service", "bench.predictor.service", "bench.sim.simulator", "bench.router.decision",
           "bench.proxy.overhead", "bench.proxy.http_client", "bench.predictor.openloop", "bench.scaling.stack_rss",
           "bench.security.guards", "bench.sim.dualpool", "bench.pages.status_pages", "bench.predictor.keepalive")


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
