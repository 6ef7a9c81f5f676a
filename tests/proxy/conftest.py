"""Fixtures: sim pods and the proxy on loopback (in-thread).

``pods``       -- in-thread sim pods, two pools (short: 2 pods, max-model-len 4096; long: 1 pod).
``serve_proxy``-- start the proxy app in a uvicorn thread for a given router config.
The whole stack as subprocesses is the suite's shared ``stack`` (tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # demo/ is a top-level folder, not an installed package
    sys.path.insert(0, str(REPO))

from router_client.config import RouterConfig  # noqa: E402
from router_client.proxy.app import ProxyState, create_app  # noqa: E402
from sim.engine.config import EngineConfig  # noqa: E402
from sim.pod.config import PodConfig  # noqa: E402
from sim.pod.launch import run_pods  # noqa: E402
from tests.procs import free_port  # noqa: E402
from tests.waiting import wait_for  # noqa: E402

TIME_SCALE = 0.02


@dataclass
class Pods:
    short: list[str]
    long: list[str]


@dataclass
class RunningProxy:
    url: str
    app: Starlette

    @property
    def state(self) -> ProxyState:
        state: ProxyState = self.app.state.proxy
        return state


@pytest.fixture(scope="session")
def pods() -> Iterator[Pods]:
    short = PodConfig(EngineConfig.from_preset("llama3-8b-a100", max_model_len=4096, seed=1), TIME_SCALE,
                      pool="short")
    long = PodConfig(EngineConfig.from_preset("llama3-8b-a100", max_model_len=32768, seed=2), TIME_SCALE,
                     pool="long")
    with run_pods([short, short, long]) as running:
        yield Pods(running.urls[:2], running.urls[2:])


def two_pool_config(pods: Pods, **extra: Any) -> RouterConfig:
    pools = [{"name": "short", "pods": pods.short, "max_context": 4096},
             {"name": "long", "pods": pods.long, "max_context": 32768}]
    return RouterConfig.parse({"pools": pools, **extra})


@pytest.fixture
def proxy(pods: Pods, serve_proxy: Callable[[RouterConfig], RunningProxy]) -> RunningProxy:
    """The proxy in front of the in-thread pods (no predictors, no trainers)."""
    return serve_proxy(two_pool_config(pods))


@contextlib.contextmanager
def _serve(config: RouterConfig) -> Iterator[RunningProxy]:
    app = create_app(config)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning",
                                           lifespan="on"))
    thread = threading.Thread(target=server.run, name="proxy", daemon=True)
    thread.start()

    def started() -> bool:
        assert thread.is_alive(), "the proxy's server thread exited"
        return bool(server.started)

    wait_for(started, timeout=15, what="the proxy starts")
    try:
        yield RunningProxy(f"http://127.0.0.1:{server.config.port}", app)
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture
def serve_proxy() -> Iterator[Callable[[RouterConfig], RunningProxy]]:
    with contextlib.ExitStack() as stack:
        yield lambda config: stack.enter_context(_serve(config))
