"""Peak RSS of every process of the local stack under the demo's trace-driven load.

    .venv/bin/python -m bench.scaling.stack_rss [--duration 45]

Runs the demo (sim pods, trainer + predictor per pool, router) for ``--duration`` seconds and
prints each child's VmHWM — the figures behind deploy/'s memory requests and limits.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from demo.__main__ import parse_args, run


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    cli.add_argument("--duration", type=float, default=45.0)
    opts = cli.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        args = parse_args(["--duration", str(opts.duration), "--workdir", str(Path(tmp) / "stack"),
                           "--summary", str(Path(tmp) / "summary.json")])
        summary, _, _ = run(args)
    print("\n| process | peak RSS MiB |\n|---|---|")
    for name, mib in sorted(summary["peak_rss_mib"].items()):
        print(f"| {name} | {mib} |")
    print(f"\nrequests {summary['requests']}, errors {summary['errors']}, retrains {summary['retrains']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
