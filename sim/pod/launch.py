"""Start simulated pods on loopback: in a background thread (tests) or in the foreground (CLI).

Each pod gets its own uvicorn server and a socket bound before serving, so ``port=0`` yields an
ephemeral port that is known as soon as the helper returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import uvicorn

from sim.engine.errors import SimError
from sim.pod.app import build_app
from sim.pod.config import PodConfig


class _QuietServer(uvicorn.Server):
    """A uvicorn server that leaves signal handling to its owner (several servers share a loop)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # so asyncio sets TCP_NODELAY
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


@dataclass
class PodGroup:
    """Servers for a list of pod configs, bound to sockets; serve with :meth:`serve`."""

    configs: Sequence[PodConfig]
    host: str = "127.0.0.1"
    ports: Sequence[int] | None = None
    log_level: str = "warning"
    servers: list[uvicorn.Server] = field(default_factory=list)
    sockets: list[socket.socket] = field(default_factory=list)

    def __post_init__(self) -> None:
        ports = list(self.ports) if self.ports is not None else [0] * len(self.configs)
        if len(ports) != len(self.configs):
            raise SimError("one port per pod config is required")
        for cfg, port in zip(self.configs, ports, strict=True):
            sock = bind(self.host, port)
            self.sockets.append(sock)
            app = build_app(cfg)
            conf = uvicorn.Config(app, log_level=self.log_level, lifespan="on", access_log=False,
                                  timeout_graceful_shutdown=2)
            self.servers.append(_QuietServer(conf))

    @property
    def urls(self) -> list[str]:
        return [f"http://{self.host}:{s.getsockname()[1]}" for s in self.sockets]

    async def serve(self) -> None:
        await asyncio.gather(*(srv.serve(sockets=[sock]) for srv, sock in zip(self.servers, self.sockets,
                                                                               strict=True)))

    def request_exit(self) -> None:
        for srv in self.servers:
            srv.should_exit = True

    @property
    def started(self) -> bool:
        return all(s.started for s in self.servers)


@dataclass
class RunningPods:
    urls: list[str]
    group: PodGroup
    thread: threading.Thread


@contextlib.contextmanager
def run_pods(
    configs: Sequence[PodConfig], host: str = "127.0.0.1", ports: Sequence[int] | None = None,
    startup_timeout_s: float = 15.0, shutdown_timeout_s: float = 10.0,
) -> Iterator[RunningPods]:
    """Run pods in a background thread for the duration of the ``with`` block; yields their URLs.

    >>> with run_pods([PodConfig(time_scale=0.05)] * 2) as pods:  # doctest: +SKIP
    ...     httpx.get(pods.urls[0] + "/health")
    """
    group = PodGroup(configs, host, ports)
    errors: list[BaseException] = []

    def _thread() -> None:
        try:
            asyncio.run(group.serve())
        except (OSError, RuntimeError, SystemExit) as exc:
            errors.append(exc)

    thread = threading.Thread(target=_thread, name="sim-pods", daemon=True)
    thread.start()
    ready = threading.Event()
    for _ in range(int(startup_timeout_s / 0.02)):
        if group.started or errors or not thread.is_alive():
            break
        ready.wait(0.02)
    if not group.started:
        group.request_exit()
        thread.join(shutdown_timeout_s)
        raise SimError(f"pods failed to start: {errors or 'timeout'}")
    try:
        yield RunningPods(group.urls, group, thread)
    finally:
        group.request_exit()
        thread.join(shutdown_timeout_s)
