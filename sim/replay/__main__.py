"""``python -m sim.replay``: replay a trace on a simulated cluster (see ``--help``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from sim.cluster.registry import default_registry
from sim.engine.errors import SimError
from sim.replay.cli import build_parser, cluster_from_args, parse_options, scenario_from_args, trace_path, trainer_token
from sim.replay.items import build_items
from sim.replay.outputs import plot_ttft_cdf, post_samples, write_requests_csv, write_samples_csv
from sim.replay.progress import ProgressBar
from sim.replay.runner import run_policy
from sim.replay.summary import format_table
from sim.workload.budgets import MaxTokensPolicy
from sim.workload.trace import load_trace


def _suffixed(path: Path, policy: str, many: bool) -> Path:
    return path.with_name(f"{path.stem}-{policy}{path.suffix}") if many else path


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    registry = default_registry()
    for module in args.policy_module:
        registry.load_module(module)
    if args.list_policies:
        print("\n".join(registry.names()))
        return 0
    cfg = cluster_from_args(args)
    scenario = scenario_from_args(args, cfg)
    trace = load_trace(trace_path(args), args.rate_scale, args.limit, args.duration, args.start)
    budget = MaxTokensPolicy.parse(args.max_tokens_policy)
    items = build_items(trace, args.seed, expose_output_length=cfg.expose_output_length,
                        slo_ttft_ms=args.slo_ttft_ms, slo_tpot_ms=args.slo_tpot_ms, max_tokens=budget)
    request_budget = {"max_tokens_policy": budget.spec,
                      "output_length": "oracle" if cfg.expose_output_length else "hidden"}
    token = trainer_token(args) if args.trainer_url else None
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    many = len(policies) > 1
    summaries: dict[str, dict[str, Any]] = {}
    ttfts: dict[str, list[float]] = {}
    for name in policies:
        bar = ProgressBar(name, enabled=not args.quiet)
        options = parse_options(args.policy_opt, name)
        summary, result = run_policy(cfg, items, name, args.seed, registry, options, bar, args.slo_ttft_ms,
                                     scenario)
        summary["request_budget"] = request_budget
        summaries[name] = summary
        ttfts[name] = [r.ttft_ms for r in result.records if r.ttft_ms is not None]
        if args.requests_csv:
            write_requests_csv(_suffixed(args.requests_csv, name, many), result.records, name)
        if args.samples_csv:
            write_samples_csv(_suffixed(args.samples_csv, name, many), result.samples)
        if args.trainer_url:
            sent = post_samples(args.trainer_url, result.samples, token=token)
            print(f"posted {sent} samples to {args.trainer_url}", file=sys.stderr)
    print(format_table(list(summaries.values())))
    if args.out:
        doc: dict[str, Any] = summaries[policies[0]] if not many else {"policies": summaries}
        args.out.write_text(json.dumps(doc, indent=2))
    if args.plot:
        plot_ttft_cdf(args.plot, ttfts, f"TTFT CDF, {len(items)} requests, rate x{args.rate_scale}")
    return 0


def main(argv: list[str] | None = None) -> None:
    try:
        code = run(argv)
    except SimError as exc:
        print(f"sim.replay: error: {exc}", file=sys.stderr)
        code = 2
    sys.exit(code)


if __name__ == "__main__":
    main()
