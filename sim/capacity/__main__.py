"""``python -m sim.capacity``: the fewest GPUs that meet a TTFT SLO (see ``--help`` and sim/README.md)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from sim.capacity.cli import COMPARE_TP, build_parser, pd_space_from, settings_from, space_from
from sim.capacity.compare import BASELINE, run_compare
from sim.capacity.joint import JointSlo
from sim.capacity.pd_compare import format_pd_compare, run_pd_compare
from sim.capacity.pd_plot import plot_pd_compare
from sim.capacity.plot import plot_compare
from sim.capacity.report import format_rows
from sim.capacity.rows import Settings, search_row, workload_of
from sim.capacity.space import CONFIGS
from sim.engine.errors import SimError
from sim.replay.cli import parse_options


def _log(line: str) -> None:
    print(f"[sim.capacity] {line}", file=sys.stderr, flush=True)


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = settings_from(args)
    if args.pd_compare:
        return run_pd(args, settings)
    doc: dict[str, Any]
    if args.compare:
        if args.cluster_config is not None:
            raise SimError("--compare builds its own pools; drop --cluster-config")
        spaces = {c: space_from(args, c, BASELINE, COMPARE_TP) for c in CONFIGS}
        follow = parse_options(args.policy_opt, "predicted-latency")
        workload = workload_of(settings)
        doc = run_compare(spaces, follow, settings, args.jobs, args.quiet, _log)
        rows = doc["rows"]
    else:
        space = space_from(args, args.config, args.policy)
        workload = workload_of(settings)
        rows = [search_row(space, settings, args.quiet)]
        doc = dict(rows[0])
    doc["settings"] = {
        "trace": str(settings.trace), "rate_scale": settings.rate_scale, "seed": settings.seed,
        "slo": settings.slo.as_dict(), "max_tokens_policy": settings.max_tokens_policy, "preset": args.preset,
        "long_context": args.long_context, "workload": workload.describe(),
    }
    print(format_rows(rows))
    if args.out:
        args.out.write_text(json.dumps(doc, indent=2))
    if args.plot:
        if not args.compare:
            raise SimError("--plot needs --compare")
        plot_compare(args.plot, rows, settings.slo.ttft_ms)
    return 0


def run_pd(args: argparse.Namespace, settings: Settings) -> int:
    """``--pd-compare``: aggregated vs P/D at equal GPUs on the whole (sliced) trace."""
    space = pd_space_from(args)
    slo = JointSlo(args.slo_ttft_ms, args.slo_tpot_ms)
    workload = workload_of(dataclasses.replace(settings, coarse_fraction=0.0))
    log = _log if not args.quiet else (lambda line: None)
    doc = run_pd_compare(space, workload.full, slo, settings.seed, log, settings.max_trials)
    doc["settings"] = {"trace": str(settings.trace), "rate_scale": settings.rate_scale, "seed": settings.seed,
                       "start_s": settings.start_s, "duration_s": settings.duration_s, "limit": settings.limit,
                       "max_tokens_policy": settings.max_tokens_policy, "long_context": args.long_context,
                       "workload": workload.describe()}
    print(format_pd_compare(doc))
    if args.out:
        args.out.write_text(json.dumps(doc, indent=2))
    if args.plot:
        plot_pd_compare(args.plot, [(settings.trace.stem, doc)])
    return 0


def main(argv: list[str] | None = None) -> None:
    try:
        code = run(argv)
    except SimError as exc:
        print(f"sim.capacity: error: {exc}", file=sys.stderr)
        code = 2
    sys.exit(code)


if __name__ == "__main__":
    main()
