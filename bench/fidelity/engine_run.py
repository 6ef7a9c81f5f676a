"""One real vLLM engine for a benchmark: start it (one core), wait for health, read its shape, stop it.

Engine workloads on this 2-core machine run one at a time: wrap the command in ``flock /tmp/engine.lock``.
"""

from __future__ import annotations

import re
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson

from demo.engine import ENGINE_STARTUP_S, EngineSpec, cores, engine_argv, engine_env
from demo.procs import LOOPBACK, PortAllocator, ProcessSet
from sim.engine.hardware import ModelSpec
from sim.engine.measured import EngineShape

CPU_DEFAULT_MAX_NUM_SEQS = 128
CPU_DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
"""vLLM's CPU defaults for the OpenAI server (``EngineArgs`` on a CPU platform) when the spec sets none."""


@dataclass(frozen=True)
class RunningEngine:
    url: str
    shape: EngineShape
    log_path: Path


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


ITERATION_LOG_ARG = "--enable-logging-iteration-details"
"""vLLM flag: one log line per engine step (context / generation requests and tokens, elapsed ms)."""


@contextmanager
def one_engine(spec: EngineSpec, log_dir: Path | None = None,
               extra_args: Sequence[str] = ()) -> Iterator[RunningEngine]:
    """Start one engine (``demo.engine``'s command line + ``extra_args``) with its compute threads on the
    first core; yields its URL and shape; stops it on exit."""
    spec.check()
    logs = log_dir or Path(tempfile.mkdtemp(prefix="engine-bench-"))
    with ProcessSet(logs) as procs:
        port = PortAllocator().take()
        url = f"http://{LOOPBACK}:{port}"
        child = procs.start("bench-engine", [*engine_argv(spec, port), *extra_args], engine_env(spec, cores()[0]),
                            health_urls=[url + "/health"])
        log(f"starting engine ({spec.model_dir}) at {url}, log {child.log_path}")
        procs.wait_healthy(ENGINE_STARTUP_S)
        yield RunningEngine(url, engine_shape(url, spec), child.log_path)


def engine_shape(url: str, spec: EngineSpec) -> EngineShape:
    """Block size and KV blocks from the engine's ``vllm:cache_config_info``, the model from config.json."""
    text = httpx.get(url + "/metrics", timeout=10.0).text
    line = next((ln for ln in text.splitlines() if ln.startswith("vllm:cache_config_info{")), "")
    labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
    if "block_size" not in labels or "num_gpu_blocks" not in labels:
        raise RuntimeError(f"{url}/metrics has no vllm:cache_config_info with block_size and num_gpu_blocks")
    return EngineShape(
        name=spec.model_dir.name, block_size=int(labels["block_size"]), num_blocks=int(labels["num_gpu_blocks"]),
        max_num_seqs=spec.max_num_seqs or CPU_DEFAULT_MAX_NUM_SEQS,
        max_num_batched_tokens=spec.max_num_batched_tokens or CPU_DEFAULT_MAX_NUM_BATCHED_TOKENS,
        max_model_len=spec.max_model_len, model=model_spec(spec.model_dir, spec.dtype),
    )


def model_spec(model_dir: Path, dtype: str) -> ModelSpec:
    """The served model's shape from its Hugging Face ``config.json``; ``dtype`` is what the engine runs."""
    c = orjson.loads((model_dir / "config.json").read_bytes())
    dtype_bytes = {"float32": 4, "float16": 2, "bfloat16": 2}.get(dtype, 2)
    heads = int(c["num_attention_heads"])
    return ModelSpec(
        name=model_dir.name, n_layers=int(c["num_hidden_layers"]), hidden=int(c["hidden_size"]), n_heads=heads,
        n_kv_heads=int(c.get("num_key_value_heads") or heads),
        head_dim=int(c.get("head_dim") or c["hidden_size"] // heads), mlp_dim=int(c["intermediate_size"]),
        vocab=int(c["vocab_size"]), dtype_bytes=dtype_bytes,
    )
