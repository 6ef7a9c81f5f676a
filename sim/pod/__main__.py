"""``python -m sim.pod``: serve N simulated vLLM pods on consecutive loopback ports."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

from sim.engine.config import PRESETS, PROVISIONING_RULES, EngineConfig
from sim.engine.errors import ConfigError, SimError
from sim.engine.kv_transfer import KVLink
from sim.pod.config import PodConfig
from sim.pod.launch import PodGroup
from sim.pod.transfer import ROLES
from sim.scenario import TimedEvent, load_scenario


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sim.pod", description="Simulated vLLM pods (OpenAI API, vLLM metrics).")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8100, help="first port; pod i listens on port + i")
    p.add_argument("--count", type=int, default=1, help="number of pods in this process")
    p.add_argument("--preset", default="llama3-8b-a100", choices=sorted(PRESETS))
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--gpu-memory-utilization", type=float, default=None)
    p.add_argument("--max-num-seqs", type=int, default=None)
    p.add_argument("--max-num-batched-tokens", type=int, default=None)
    p.add_argument("--num-gpu-blocks", type=int, default=None, help="override the KV cache size in blocks")
    p.add_argument("--tensor-parallel-size", type=int, default=None, help="GPUs per pod (needs a TP profile)")
    p.add_argument("--provisioning", choices=PROVISIONING_RULES, default=None,
                   help="worst-case: cap max_num_seqs so max_num_seqs x max_model_len fits the KV cache")
    p.add_argument("--no-prefix-caching", action="store_true")
    p.add_argument("--noise-std", type=float, default=None)
    p.add_argument("--time-scale", type=float, default=1.0, help="real s per simulated s (0.1 = 10x faster)")
    p.add_argument("--seed", type=int, default=0, help="pod i uses seed + i")
    p.add_argument("--pool", default="", help="pool label reported by /health")
    p.add_argument("--output-trace", type=Path, default=None,
                   help="trace for output-length draws (default: the conv trace)")
    p.add_argument("--max-queue", type=int, default=10_000)
    p.add_argument("--scenario", type=Path, default=None,
                   help="TOML [[events]] (pods are pod-0 .. pod-<count-1>); at_s = virtual s since start")
    p.add_argument("--scenario-span-s", type=float, default=None,
                   help="virtual seconds that at_fraction = 1.0 stands for (at_fraction is an error without it)")
    p.add_argument("--role", choices=ROLES, default="both",
                   help="P/D role: prefill pods answer do_remote_decode requests with kv_transfer_params, decode pods "
                   "pull the KV of do_remote_prefill requests over --kv-link-gbps (both: either)")
    p.add_argument("--kv-link-gbps", type=float, default=100.0, help="decode pods' KV ingress bandwidth (Gbit/s)")
    p.add_argument("--kv-link-latency-ms", type=float, default=1.0, help="per-transfer latency of that link")
    p.add_argument("--log-level", default="warning")
    return p


def scenario_events(args: argparse.Namespace, engines: dict[str, EngineConfig]) -> tuple[TimedEvent, ...]:
    if args.scenario is None:
        return ()
    if args.scenario_span_s is not None and args.scenario_span_s <= 0:
        raise ConfigError("--scenario-span-s must be > 0")
    scenario = load_scenario(args.scenario, list(engines))
    scenario.check_pods(engines)
    return tuple(scenario.resolve(0.0, args.scenario_span_s))


def configs_from_args(args: argparse.Namespace) -> list[PodConfig]:
    if args.count < 1:
        raise SimError("--count must be >= 1")
    engines: dict[str, EngineConfig] = {}
    for i in range(args.count):
        engine = EngineConfig.from_preset(
            args.preset,
            served_model_name=args.served_model_name,
            max_model_len=args.max_model_len,
            gpu_memory_utilization=args.gpu_memory_utilization,
            max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens,
            num_gpu_blocks_override=args.num_gpu_blocks,
            tensor_parallel_size=args.tensor_parallel_size,
            provisioning=args.provisioning,
            enable_prefix_caching=False if args.no_prefix_caching else None,
            noise_std=args.noise_std,
            seed=args.seed + i,
        )
        engines[f"pod-{i}"] = engine
    events = scenario_events(args, engines)
    try:
        link = KVLink(args.kv_link_gbps, args.kv_link_latency_ms)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return [PodConfig(engine, args.time_scale, args.output_trace, args.max_queue, args.pool, pod_id=pod_id,
                      scenario=tuple(e for e in events if e.pod == pod_id), role=args.role, kv_link=link)
            for pod_id, engine in engines.items()]


async def _serve(group: PodGroup) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, group.request_exit)
    await group.serve()


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        configs = configs_from_args(args)
        ports = [args.port + i for i in range(args.count)]
        group = PodGroup(configs, args.host, ports, args.log_level)
    except (SimError, OSError) as exc:
        print(f"sim.pod: error: {exc}", file=sys.stderr)
        sys.exit(2)
    for url, cfg in zip(group.urls, configs, strict=True):
        e = cfg.engine
        print(f"sim.pod: {cfg.pod_id} {e.model_name} ({e.preset}, max_model_len={e.max_model_len}, "
              f"{e.num_gpu_blocks} KV blocks, {len(cfg.scenario)} scheduled events) at {url}",
              file=sys.stderr, flush=True)
    asyncio.run(_serve(group))


if __name__ == "__main__":
    main()
