"""Arguments of ``python -m sim.capacity`` and how they become search spaces and settings."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from sim.capacity.pd_space import PdSpace
from sim.capacity.rows import Settings
from sim.capacity.slo import Slo
from sim.capacity.space import CONFIGS, SearchSpace, file_space, preset_space
from sim.cluster.autoscale import AutoscaleConfig
from sim.cluster.config_file import load_cluster_file
from sim.engine.config import PRESETS
from sim.engine.errors import ConfigError
from sim.engine.kv_transfer import KVLink
from sim.paths import default_trace
from sim.replay.cli import parse_options
from sim.workload.budgets import DEFAULT_MAX_TOKENS_POLICY, MaxTokensPolicy

DEFAULT_PRESET = "llama3-70b-a100-tp4"
COMPARE_TP = (4, 8)
AUTOSCALE_KEYS = {f for f in AutoscaleConfig.__dataclass_fields__}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sim.capacity", description="Fewest GPUs that meet a TTFT SLO on a trace "
                                "(one configuration, or --compare for the single/dual-pool table).")
    p.add_argument("--trace", type=Path, default=None,
                   help="trace CSV (default: ../shared/data/azure_llm_2023_conv.csv)")
    p.add_argument("--compare", action="store_true",
                   help="the table: 3 configurations x round-robin, predicted-latency")
    p.add_argument("--policy", default="predicted-latency", help="replay policy (round-robin, predicted-latency, ...)")
    p.add_argument("--config", choices=CONFIGS, default=None,
                   help="configuration family (default: dual-pool for --policy dual-pool, else single-aggressive)")
    p.add_argument("--cluster-config", type=Path, default=None,
                   help="TOML/JSON pools (one pool: single, two: short + long); counts are starting guesses")
    p.add_argument("--preset", default=DEFAULT_PRESET, choices=sorted(PRESETS))
    p.add_argument("--long-context", type=int, default=32768, help="max_model_len of single pools and the long pool")
    p.add_argument("--short-contexts", default="4096,8192", help="dual-pool: short-pool max_model_len candidates")
    p.add_argument("--total-thresholds", default="none",
                   help="dual-pool: classifier total-token thresholds to try ('none' = context rule only)")
    p.add_argument("--tp", default=None,
                   help="tensor-parallel degrees to try, e.g. 4,8 (default: the preset's; --compare: 4,8)")
    p.add_argument("--rate-scale", type=float, default=4.0, help="arrival-rate multiplier")
    p.add_argument("--slo-ttft-ms", type=float, default=2000.0)
    p.add_argument("--attainment", type=float, default=0.99, help="share of requests within the TTFT SLO")
    p.add_argument("--max-tokens-policy", default=DEFAULT_MAX_TOKENS_POLICY, metavar="SPEC")
    p.add_argument("--policy-opt", action="append", default=[], metavar="[POLICY.]KEY=VALUE")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit", type=int, default=None, help="first N requests of the trace")
    p.add_argument("--max-pods", type=int, default=64, help="per pool")
    p.add_argument("--max-trials", type=int, default=60, help="replays per search")
    p.add_argument("--coarse-fraction", type=float, default=0.2,
                   help="share of the trace's duration in the coarse slice (0: whole trace only)")
    p.add_argument("--warmup-fraction", type=float, default=0.05, help="warm-up before the coarse slice")
    p.add_argument("--autoscale", action="store_true", help="also replay each answer with a KEDA-like autoscaler")
    p.add_argument("--autoscale-opt", action="append", default=[], metavar="KEY=VALUE",
                   help=f"autoscaler settings: {', '.join(sorted(AUTOSCALE_KEYS))}")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="--compare: worker processes")
    p.add_argument("--out", type=Path, default=None, help="JSON result")
    p.add_argument("--plot", type=Path, default=None, help="--compare: PNG of GPU-hours and P99 TTFT")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    pd = p.add_argument_group("aggregated vs prefill/decode disaggregation (--pd-compare)")
    pd.add_argument("--pd-compare", action="store_true",
                    help="fewest GPUs meeting a P99 TTFT and a P99 TPOT SLO together: aggregated pods vs the best "
                    "P:D split (one engine, --preset at --tp)")
    pd.add_argument("--pd-policy", default=None,
                    help="the P/D replays' policy (default: pd-<--policy>, e.g. pd-load-prefix for load-prefix)")
    pd.add_argument("--slo-tpot-ms", type=float, default=100.0, help="P99 TPOT SLO (ms)")
    pd.add_argument("--link-gbps", type=float, default=None, help="KV transfer bandwidth per GPU NIC (default 100)")
    pd.add_argument("--link-latency-ms", type=float, default=None, help="KV transfer latency (default 1)")
    pd.add_argument("--start", type=float, default=0.0, help="slice start, trace seconds")
    pd.add_argument("--duration", type=float, default=None, help="slice length, trace seconds")
    return p


def _ints(text: str, flag: str, allow_none: bool = False) -> tuple[int | None, ...]:
    out: list[int | None] = []
    for part in text.split(","):
        part = part.strip().lower()
        if allow_none and part in ("none", "null"):
            out.append(None)
            continue
        if not part.isdigit() or int(part) < 1:
            raise ConfigError(f"{flag}: expected a comma-separated list of positive integers, got {text!r}")
        out.append(int(part))
    return tuple(out)


def settings_from(args: argparse.Namespace) -> Settings:
    MaxTokensPolicy.parse(args.max_tokens_policy)
    if args.rate_scale <= 0:
        raise ConfigError(f"--rate-scale must be > 0, got {args.rate_scale}")
    if not 0 <= args.coarse_fraction < 1 or not 0 <= args.warmup_fraction < 1:
        raise ConfigError("--coarse-fraction and --warmup-fraction must be in [0, 1)")
    if args.max_trials < 1:
        raise ConfigError(f"--max-trials must be >= 1, got {args.max_trials}")
    if args.start < 0 or (args.duration is not None and args.duration <= 0):
        raise ConfigError("--start must be >= 0 and --duration > 0")
    return Settings(args.trace or default_trace(), args.rate_scale, args.seed, Slo(args.slo_ttft_ms, args.attainment),
                    args.max_tokens_policy, args.coarse_fraction, args.warmup_fraction, args.limit, args.max_trials,
                    autoscale_from(args), args.start, args.duration)


def pd_space_from(args: argparse.Namespace) -> PdSpace:
    """``--pd-compare``'s configurations: one engine, the aggregated and the P/D policy."""
    if args.cluster_config is not None or args.config is not None or args.compare:
        raise ConfigError("--pd-compare builds its own pools: drop --compare / --config / --cluster-config")
    tps = _ints(args.tp, "--tp") if args.tp is not None else ()
    if len(tps) > 1:
        raise ConfigError(f"--pd-compare compares at one TP degree, got --tp {args.tp}")
    pd_policy = args.pd_policy or f"pd-{args.policy}"
    link = KVLink(args.link_gbps if args.link_gbps is not None else KVLink.gbps,
                  args.link_latency_ms if args.link_latency_ms is not None else KVLink.latency_ms)
    return PdSpace(args.preset, tps[0] if tps else None, {"max_model_len": args.long_context}, link, args.policy,
                   pd_policy, parse_options(args.policy_opt, args.policy), parse_options(args.policy_opt, pd_policy),
                   args.max_pods)


def autoscale_from(args: argparse.Namespace) -> AutoscaleConfig | None:
    if not args.autoscale:
        if args.autoscale_opt:
            raise ConfigError("--autoscale-opt needs --autoscale")
        return None
    values: dict[str, float | int] = {}
    for pair in args.autoscale_opt:
        key, sep, value = pair.partition("=")
        if not sep or key not in AUTOSCALE_KEYS:
            raise ConfigError(f"--autoscale-opt: unknown key {key!r} (known: {', '.join(sorted(AUTOSCALE_KEYS))})")
        try:
            values[key] = int(value) if key == "min_pods" else float(value)
        except ValueError:
            raise ConfigError(f"--autoscale-opt {key!r}: not a number: {value!r}") from None
    return AutoscaleConfig(**values)  # type: ignore[arg-type]


def space_from(args: argparse.Namespace, config: str | None, policy: str,
               tp_default: tuple[int, ...] = ()) -> SearchSpace:
    options = parse_options(args.policy_opt, policy)
    thresholds = _ints(args.total_thresholds, "--total-thresholds", allow_none=True)
    if args.cluster_config is not None:
        if config is not None or args.tp is not None:
            raise ConfigError("--config / --tp do not combine with --cluster-config (the file sets the pools)")
        pools, extra = load_cluster_file(args.cluster_config)
        if extra:
            raise ConfigError(f"{args.cluster_config}: cluster keys {sorted(extra)} are not used by sim.capacity")
        return file_space(pools, policy, thresholds, options, args.max_pods)
    chosen = config or ("dual-pool" if policy.startswith("dual-pool") else "single-aggressive")
    if policy.startswith("dual-pool") and chosen != "dual-pool":
        raise ConfigError(f"--policy {policy!r} needs two pools (--config dual-pool or a two-pool cluster file)")
    tps = _ints(args.tp, "--tp") if args.tp is not None else tp_default
    contexts = _ints(args.short_contexts, "--short-contexts")
    table_policy = "predicted-latency" if policy == "dual-pool" else (
        "round-robin" if policy == "dual-pool-round-robin" else policy)
    return preset_space(chosen, table_policy, args.preset, args.long_context, tuple(c for c in contexts if c),
                        thresholds, tuple(t for t in tps if t), options, args.max_pods)
