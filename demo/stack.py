"""The local stack on loopback: sim pods in two pools, a trainer + predictor per pool, the router.

Every part runs as a child process with its real command line (the same ones docker-compose.yml
uses), on ephemeral ports, with its data under ``workdir``. ``Stack`` is a context manager;
leaving it stops every child it started.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson

from demo.engine import ENGINE_STARTUP_S, EngineSpec, start_engines
from demo.procs import LOOPBACK, PortAllocator, ProcessSet

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class PoolSpec:
    name: str
    pods: int
    max_model_len: int
    max_num_seqs: int | None = None
    gpu_memory_utilization: float | None = None
    preset: str = "llama3-8b-a100"
    engine: EngineSpec | None = None
    """Real vLLM engines (``demo.engine``, one core each) instead of sim pods."""
    urls: tuple[str, ...] = ()
    """Pods that already run (e.g. engines shared by several stacks): the stack neither starts nor stops them
    and ``pods`` is ignored."""


SHORT = PoolSpec("short", 3, 4096, max_num_seqs=256)
LONG = PoolSpec("long", 2, 32768, max_num_seqs=64, gpu_memory_utilization=0.95)


@dataclass(frozen=True)
class StackSpec:
    pools: tuple[PoolSpec, ...] = (SHORT, LONG)
    time_scale: float = 0.1
    """Real seconds per simulated second for the pods (0.1 = ten times faster)."""
    retrain_interval_s: float = 4.0
    sync_interval_s: float = 1.0
    min_samples_for_retrain: int = 50
    predictors: bool = True
    trainer_env: Mapping[str, str] = field(default_factory=dict)
    router: Mapping[str, Any] = field(default_factory=dict)
    """Top-level router-config keys merged over the defaults (e.g. ``{"slo": {...}}``)."""
    seed: int = 0
    prepare: Callable[[Mapping[str, list[str]]], Mapping[str, str]] | None = None
    """Called with the pods' URLs per pool once they are healthy, before any trainer starts; returns more trainer
    environment (the real-engine demo builds the prior's seed from the engine's profile)."""


class Stack:
    """Start with ``with Stack(spec, workdir) as stack:``; URLs are attributes once started."""

    def __init__(self, spec: StackSpec, workdir: Path, startup_timeout_s: float | None = None) -> None:
        self.spec = spec
        self.workdir = workdir
        engines = any(p.engine is not None for p in spec.pools)
        self.startup_timeout_s = startup_timeout_s or (ENGINE_STARTUP_S if engines else 90.0)
        self.procs = ProcessSet(workdir / "logs", cwd=REPO)
        self.ports = PortAllocator()
        self.pod_urls: dict[str, list[str]] = {}
        self.trainer_urls: dict[str, str] = {}
        self.predictor_urls: dict[str, str] = {}
        self.router_url = ""
        self.config_path = workdir / "router-config.json"

    def __enter__(self) -> Stack:
        try:
            self.start()
        except BaseException:
            self.procs.stop_all()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.procs.stop_all()

    def start(self) -> None:
        for pool in self.spec.pools:
            self._start_pods(pool)
        env: Mapping[str, str] = {}
        if self.spec.prepare is not None:
            self.procs.wait_healthy(self.startup_timeout_s)
            env = self.spec.prepare(self.pod_urls)
        for pool in self.spec.pools:
            self._start_trainer(pool, env)
            if self.spec.predictors:
                self._start_predictor(pool)
        self.config_path.write_bytes(orjson.dumps(self.router_config(), option=orjson.OPT_INDENT_2))
        self._start_router()
        self.procs.wait_healthy(self.startup_timeout_s)

    def router_config(self) -> dict[str, Any]:
        pools = [{"name": p.name, "pods": self.pod_urls[p.name], "max_context": p.max_model_len,
                  "trainer_url": self.trainer_urls[p.name],
                  "predictor_urls": [self.predictor_urls[p.name]] if p.name in self.predictor_urls else []}
                 for p in self.spec.pools]
        config: dict[str, Any] = {"pools": pools, "predictor_timeout_ms": 50.0,
                                  "scheduler": {"seed": self.spec.seed}}
        config.update(self.spec.router)
        return config

    def _start_pods(self, pool: PoolSpec) -> None:
        if pool.urls:
            self.pod_urls[pool.name] = list(pool.urls)
            return
        if pool.engine is not None:
            self.pod_urls[pool.name] = start_engines(self.procs, self.ports, pool.engine, pool.pods,
                                                     prefix=f"engine-{pool.name}")
            return
        base = self.ports.take(pool.pods)
        argv = [sys.executable, "-m", "sim.pod", "--host", LOOPBACK, "--port", str(base),
                "--count", str(pool.pods), "--preset", pool.preset, "--max-model-len", str(pool.max_model_len),
                "--time-scale", str(self.spec.time_scale), "--pool", pool.name,
                "--seed", str(self.spec.seed + 100 * len(self.pod_urls))]
        if pool.max_num_seqs is not None:
            argv += ["--max-num-seqs", str(pool.max_num_seqs)]
        if pool.gpu_memory_utilization is not None:
            argv += ["--gpu-memory-utilization", str(pool.gpu_memory_utilization)]
        urls = [f"http://{LOOPBACK}:{base + i}" for i in range(pool.pods)]
        self.pod_urls[pool.name] = urls
        self.procs.start(f"sim-{pool.name}", argv, health_urls=[u + "/health" for u in urls])

    def _start_trainer(self, pool: PoolSpec, extra_env: Mapping[str, str]) -> None:
        port = self.ports.take()
        url = f"http://{LOOPBACK}:{port}"
        env = {"LATENCY_RETRAINING_INTERVAL_SEC": str(self.spec.retrain_interval_s),
               "LATENCY_MIN_SAMPLES_FOR_RETRAIN": str(self.spec.min_samples_for_retrain),
               "LATENCY_TRAIN_THREADS": "1", "OMP_NUM_THREADS": "1", **self.spec.trainer_env, **extra_env}
        argv = [sys.executable, "-m", "trainer", "--host", LOOPBACK, "--port", str(port),
                "--data-dir", str(self.workdir / f"trainer-{pool.name}")]
        self.trainer_urls[pool.name] = url
        self.procs.start(f"trainer-{pool.name}", argv, env, health_urls=[url + "/readyz"])

    def _start_predictor(self, pool: PoolSpec) -> None:
        port = self.ports.take()
        url = f"http://{LOOPBACK}:{port}"
        env = {"MODEL_SYNC_INTERVAL_SEC": str(self.spec.sync_interval_s), "OMP_NUM_THREADS": "1",
               "LOCAL_MODEL_DIR": str(self.workdir / f"predictor-{pool.name}")}
        argv = [sys.executable, "-m", "predictor", "--host", LOOPBACK, "--port", str(port),
                "--training-url", self.trainer_urls[pool.name]]
        self.predictor_urls[pool.name] = url
        self.procs.start(f"predictor-{pool.name}", argv, env, health_urls=[url + "/readyz"])

    def _start_router(self) -> None:
        port = self.ports.take()
        self.router_url = f"http://{LOOPBACK}:{port}"
        argv = [sys.executable, "-m", "router_client", "--host", LOOPBACK, "--port", str(port),
                "--config", str(self.config_path), "--log-level", "warning"]
        self.procs.start("router", argv, health_urls=[self.router_url + "/readyz"])

    def logs(self, name: str) -> Path:
        return self.procs.children[name].log_path
