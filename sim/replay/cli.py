"""Argument parsing for ``python -m sim.replay`` (kept apart from the run logic)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from sim.cluster.config import ClusterConfig, PoolSpec, parse_pd, parse_pools
from sim.cluster.config_file import load_cluster_file
from sim.engine.config import PRESETS, PROVISIONING_RULES, EngineConfig
from sim.engine.errors import ConfigError
from sim.engine.kv_transfer import KVLink
from sim.engine.measured import load_profile
from sim.paths import default_trace
from sim.scenario import Scenario, load_scenario
from sim.workload.budgets import DEFAULT_MAX_TOKENS_POLICY


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sim.replay", description="Replay a trace on a simulated vLLM cluster "
                                "in virtual time under one or more routing policies.")
    p.add_argument("--trace", type=Path, default=None,
                   help="trace CSV (default: ../shared/data/azure_llm_2023_conv.csv)")
    p.add_argument("--pods", type=int, default=8, help="pods in the single default pool")
    p.add_argument("--preset", default="llama3-8b-a100", choices=sorted(PRESETS))
    p.add_argument("--profile", type=Path, default=None,
                   help="measured engine profile JSON (bench.fidelity.engine_profile) instead of --preset, single pool")
    p.add_argument("--pools", default=None,
                   help="multi-pool spec name:count[:preset],... e.g. short:6,long:2")
    p.add_argument("--cluster-config", type=Path, default=None,
                   help="JSON/TOML file with [[pools]] and cluster keys")
    p.add_argument("--pd", default=None, metavar="P:D",
                   help="prefill/decode disaggregation: P prefill pods + D decode pods of --preset")
    p.add_argument("--link-gbps", type=float, default=None,
                   help=f"KV transfer bandwidth per GPU NIC, Gbit/s (default {KVLink.gbps:g})")
    p.add_argument("--link-latency-ms", type=float, default=None,
                   help=f"KV transfer latency per request, ms (default {KVLink.latency_ms:g})")
    p.add_argument("--policy", default="round-robin", help="policy name, or comma-separated names to compare")
    p.add_argument("--policy-module", action="append", default=[],
                   help="import a module that registers policies")
    p.add_argument("--policy-opt", action="append", default=[], metavar="KEY=VALUE",
                   help="policy option; POLICY.KEY=VALUE scopes it to one policy")
    p.add_argument("--list-policies", action="store_true")
    p.add_argument("--rate-scale", type=float, default=1.0,
                   help="arrival-rate multiplier (2 = twice as fast)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit", type=int, default=None, help="take the first N requests")
    p.add_argument("--start", type=float, default=0.0, help="slice start, trace seconds")
    p.add_argument("--duration", type=float, default=None, help="slice length, trace seconds")
    p.add_argument("--out", type=Path, default=None, help="summary JSON")
    p.add_argument("--requests-csv", type=Path, default=None, help="per-request table (CSV)")
    p.add_argument("--samples-csv", type=Path, default=None, help="training samples (TrainingEntry columns)")
    p.add_argument("--trainer-url", default=None, help="POST samples to {url}/add_training_data_bulk")
    p.add_argument("--trainer-token", default=os.environ.get("LATENCY_WRITE_TOKEN"),
                   help="bearer token for --trainer-url (default: env LATENCY_WRITE_TOKEN)")
    p.add_argument("--trainer-token-file", type=Path, default=None,
                   help="file holding that token (e.g. a mounted Secret); wins over --trainer-token")
    p.add_argument("--plot", type=Path, default=None, help="PNG of the TTFT CDF per policy")
    p.add_argument("--scenario", type=Path, default=None,
                   help="TOML [[events]]: per-pod speed factor, fail/restore, prefix flush, KV size")
    p.add_argument("--slo-ttft-ms", type=float, default=None)
    p.add_argument("--slo-tpot-ms", type=float, default=None)
    p.add_argument("--scrape-interval-ms", type=float, default=50.0, help="metrics staleness (0 = fresh)")
    p.add_argument("--max-tokens-policy", default=DEFAULT_MAX_TOKENS_POLICY, metavar="SPEC",
                   help="client max_tokens per request: fixed:N | multiple:K (x median output) | "
                        "choice:N=W,... | none (default %(default)s)")
    p.add_argument("--expose-output-length", action="store_true",
                   help="ORACLE: policies see the exact output length in expected_output_tokens")
    p.add_argument("--hide-output-length", action="store_true",
                   help="accepted for old scripts; no effect (output lengths are hidden by default)")
    p.add_argument("--no-fast-forward", action="store_true", help="simulate every decode step individually")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    _engine_flags(p)
    return p


def _engine_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("engine overrides (all pools)")
    g.add_argument("--max-model-len", type=int, default=None)
    g.add_argument("--max-num-seqs", type=int, default=None)
    g.add_argument("--max-num-batched-tokens", type=int, default=None)
    g.add_argument("--gpu-memory-utilization", type=float, default=None)
    g.add_argument("--num-gpu-blocks", type=int, default=None, help="override the KV cache size in blocks")
    g.add_argument("--tensor-parallel-size", type=int, default=None, help="GPUs per pod (needs a TP profile)")
    g.add_argument("--provisioning", choices=PROVISIONING_RULES, default=None,
                   help="worst-case: cap max_num_seqs so max_num_seqs x max_model_len fits the KV cache")
    g.add_argument("--no-prefix-caching", action="store_true")
    g.add_argument("--noise-std", type=float, default=None)


def trainer_token(args: argparse.Namespace) -> str | None:
    """The token for --trainer-url: --trainer-token-file, else --trainer-token / $LATENCY_WRITE_TOKEN."""
    if args.trainer_token_file is not None:
        try:
            token = args.trainer_token_file.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"--trainer-token-file: {exc}") from None
        if not token:
            raise ConfigError(f"--trainer-token-file {args.trainer_token_file} is empty")
        return token
    return args.trainer_token or None


def engine_overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "max_model_len": args.max_model_len,
        "max_num_seqs": args.max_num_seqs,
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "num_gpu_blocks_override": args.num_gpu_blocks,
        "tensor_parallel_size": args.tensor_parallel_size,
        "provisioning": args.provisioning,
        "enable_prefix_caching": False if args.no_prefix_caching else None,
        "noise_std": args.noise_std,
    }


def cluster_from_args(args: argparse.Namespace) -> ClusterConfig:
    overrides = engine_overrides(args)
    extra: dict[str, Any] = {}
    if args.cluster_config is not None and args.profile is not None:
        raise ConfigError("--profile does not combine with --cluster-config")
    if args.pd and (args.cluster_config is not None or args.profile is not None):
        raise ConfigError("--pd does not combine with --cluster-config / --profile (give roles in the file)")
    if args.cluster_config is not None:
        given = sorted(k for k, v in overrides.items() if v is not None)
        if given:
            raise ConfigError(f"engine override flags ({', '.join(given)}) do not combine with --cluster-config; "
                              "set those keys in the file")
        pools, extra = load_cluster_file(args.cluster_config)
    elif args.profile is not None:
        if args.pools:
            raise ConfigError("--profile describes one engine: it does not combine with --pools")
        pools = (PoolSpec("pod", args.pods, load_profile(args.profile).engine_config(**overrides)),)
    elif args.pd:
        if args.pools:
            raise ConfigError("--pd gives the pools: it does not combine with --pools")
        pools = parse_pd(args.pd, args.preset, overrides)
    elif args.pools:
        pools = parse_pools(args.pools, args.preset, overrides)
    else:
        if args.pods < 1:
            raise ConfigError("--pods must be >= 1")
        pools = (PoolSpec("pod", args.pods, EngineConfig.from_preset(args.preset, **overrides)),)
    if args.hide_output_length and args.expose_output_length:
        raise ConfigError("--hide-output-length and --expose-output-length contradict each other")
    kwargs: dict[str, Any] = {
        "scrape_interval_s": args.scrape_interval_ms / 1e3,
        "fast_forward": not args.no_fast_forward,
        "expose_output_length": args.expose_output_length,
    }
    kwargs.update(extra)
    kwargs["kv_link"] = _kv_link(args, kwargs.pop("kv_link_gbps", None), kwargs.pop("kv_link_latency_ms", None))
    return ClusterConfig(pools=pools, **kwargs)


def _kv_link(args: argparse.Namespace, gbps: float | None, latency_ms: float | None) -> KVLink:
    """The KV link from the flags, else the cluster file's ``kv_link_gbps`` / ``kv_link_latency_ms``."""
    gbps = args.link_gbps if args.link_gbps is not None else gbps
    latency_ms = args.link_latency_ms if args.link_latency_ms is not None else latency_ms
    try:
        return KVLink(gbps=KVLink.gbps if gbps is None else gbps,
                      latency_ms=KVLink.latency_ms if latency_ms is None else latency_ms)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def scenario_from_args(args: argparse.Namespace, cfg: ClusterConfig) -> Scenario | None:
    if args.scenario is None:
        return None
    return load_scenario(args.scenario, [pod for pod, _ in cfg.pod_ids()])


def parse_options(pairs: list[str], policy: str) -> dict[str, str]:
    """Options for ``policy``: ``key=value`` applies to every policy, ``policy.key=value`` to one."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--policy-opt expects [POLICY.]KEY=VALUE, got {pair!r}")
        scope, dot, name = key.rpartition(".")
        if not dot:
            out.setdefault(key, value)
        elif scope == policy:
            out[name] = value
    return out


def trace_path(args: argparse.Namespace) -> Path:
    return args.trace if args.trace is not None else default_trace()
