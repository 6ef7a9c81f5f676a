"""Real vLLM engines (CPU build) as child processes: where they live, how they start, how they are reset.

``make engine`` installs vLLM into ``.venv-engine`` (never into ``.venv``) and builds the default tiny model;
everything here only *starts* that interpreter. One engine = one ``vllm.entrypoints.openai.api_server``
process (plus its engine-core child) whose compute threads are bound to one core
(``VLLM_CPU_OMP_THREADS_BIND``), with a fixed KV-cache budget (``VLLM_CPU_KVCACHE_SPACE`` GiB), prefix
caching on and ``VLLM_SERVER_DEV_MODE=1`` so ``POST /reset_prefix_cache`` gives every benchmark run a cold
cache without a restart.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from demo.procs import LOOPBACK, PortAllocator, ProcessSet

REPO = Path(__file__).resolve().parents[1]
ENGINE_VENV = REPO / ".venv-engine"
DEFAULT_MODEL = ENGINE_VENV / "models" / "tiny-llama"
"""Where ``make engine`` builds the default model (``python -m demo.tiny_model`` defaults, seed 0)."""
SERVED_NAME = "tiny"


class EngineMissing(RuntimeError):
    """The engine virtualenv or the model is not there: the message says which command builds it."""


@dataclass(frozen=True)
class EngineSpec:
    model_dir: Path = DEFAULT_MODEL
    max_model_len: int = 4096
    kv_cache_gib: float = 1.0
    dtype: str = "float32"
    """float32: the CPUs here have no native bf16, where vLLM's default downcast runs ~4x slower."""
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    served_name: str = SERVED_NAME
    python: Path = ENGINE_VENV / "bin" / "python"

    def check(self) -> None:
        if not self.python.exists():
            raise EngineMissing(f"no engine virtualenv at {self.python.parent.parent}: run `make engine` first")
        if not (self.model_dir / "config.json").is_file():
            raise EngineMissing(f"no model at {self.model_dir}: run `make engine` (default model) or "
                                f"`{self.python} -m demo.tiny_model --out {self.model_dir}`")


def engine_argv(spec: EngineSpec, port: int) -> list[str]:
    argv = [str(spec.python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(spec.model_dir),
            "--served-model-name", spec.served_name, "--host", LOOPBACK, "--port", str(port),
            "--enforce-eager", "--enable-prefix-caching", "--max-model-len", str(spec.max_model_len),
            "--dtype", spec.dtype, "--disable-uvicorn-access-log", "--seed", "0"]
    if spec.max_num_seqs is not None:
        argv += ["--max-num-seqs", str(spec.max_num_seqs)]
    if spec.max_num_batched_tokens is not None:
        argv += ["--max-num-batched-tokens", str(spec.max_num_batched_tokens)]
    return argv


def engine_env(spec: EngineSpec, core: int) -> dict[str, str]:
    return {"VLLM_CPU_KVCACHE_SPACE": f"{spec.kv_cache_gib:g}", "VLLM_CPU_OMP_THREADS_BIND": str(core),
            "VLLM_SERVER_DEV_MODE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "OMP_NUM_THREADS": "1"}


def cores() -> list[int]:
    """The cores this process may run on (engines are bound to them round-robin)."""
    return sorted(os.sched_getaffinity(0))


def start_engines(procs: ProcessSet, ports: PortAllocator, spec: EngineSpec, count: int,
                  prefix: str = "engine", first_core: int = 0) -> list[str]:
    """Start ``count`` engines (not waited for: call ``procs.wait_healthy``); returns their base URLs."""
    spec.check()
    available = cores()
    urls = []
    for i in range(count):
        port = ports.take()
        core = available[(first_core + i) % len(available)]
        url = f"http://{LOOPBACK}:{port}"
        procs.start(f"{prefix}-{i}", engine_argv(spec, port), engine_env(spec, core), health_urls=[url + "/health"])
        urls.append(url)
    return urls


def reset_prefix_caches(urls: Sequence[str], timeout_s: float = 30.0) -> None:
    """Empty every engine's prefix cache (a fresh engine state for the next run); raises on failure."""
    with httpx.Client(timeout=timeout_s) as client:
        for url in urls:
            resp = client.post(url + "/reset_prefix_cache")
            if resp.status_code != 200:
                raise RuntimeError(f"{url}/reset_prefix_cache answered {resp.status_code}: {resp.text[:200]}")


ENGINE_STARTUP_S = 420.0
"""Health deadline for engines on a loaded 2-core machine (~45 s each when quiet; they start in parallel)."""
