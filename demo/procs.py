"""Child processes on loopback: free ports, start, wait for health, stop (only what we started).

Every child runs in its own session, logs to a file, and is stopped by pid: SIGTERM, then SIGKILL
after a grace period. ``ProcessSet`` is a context manager, so an error or Ctrl-C in the caller
still tears every child down.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import httpx

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


class PortAllocator:
    """Hands out loopback ports that are free now and never handed out twice by this allocator.

    Ports come from below the Linux ephemeral range (20000–32767), so the kernel's own port-0
    choices (clients, other tests) do not collide with blocks reserved for pods.
    """

    def __init__(self, low: int = 20000, high: int = 32000, seed: int | None = None) -> None:
        self._low, self._high = low, high
        self._taken: set[int] = set()
        self._rng = random.Random(seed)

    def take(self, count: int = 1, attempts: int = 500) -> int:
        """First port of ``count`` consecutive free ports (sim pods bind ``port + i``)."""
        for _ in range(attempts):
            base = self._rng.randrange(self._low, self._high - count)
            block = range(base, base + count)
            if any(p in self._taken for p in block) or not all(_is_free(p) for p in block):
                continue
            self._taken.update(block)
            return base
        raise RuntimeError(f"no block of {count} free ports found")


def free_port_block(count: int) -> int:
    """``count`` consecutive free ports (single use; prefer one ``PortAllocator`` per stack)."""
    return PortAllocator().take(count)


def _is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


class StartupError(RuntimeError):
    """A child exited or did not become healthy in time (message carries its log tail)."""


@dataclass
class Child:
    name: str
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes]
    health_urls: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    """What ``start`` added to the environment (``restart`` starts the same command line with it)."""

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def peak_rss_mb(self) -> float | None:
        """Peak resident set size (VmHWM) in MiB, read from /proc while the child runs."""
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
        except OSError:
            return None
        return None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class ProcessSet:
    """Starts children, waits for their health URLs, and stops them all on exit."""

    def __init__(self, log_dir: Path, cwd: Path | None = None) -> None:
        self.log_dir = log_dir
        self.cwd = cwd
        self.children: dict[str, Child] = {}
        log_dir.mkdir(parents=True, exist_ok=True)

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
              health_urls: Sequence[str] = ()) -> Child:
        log_path = self.log_dir / f"{name}.log"
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        with log_path.open("ab") as log:
            popen = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT, env=full_env,
                                     cwd=self.cwd, start_new_session=True)
        child = Child(name, list(argv), log_path, popen, list(health_urls), dict(env or {}))
        self.children[name] = child
        return child

    def restart(self, name: str, timeout_s: float = 30.0) -> Child:
        """Stop ``name`` (if it runs) and start it again with the same command line; wait until it is healthy."""
        old = self.children[name]
        self.stop(name)
        child = self.start(name, old.argv, old.env, old.health_urls)
        self.wait_healthy(timeout_s, [name])
        return child

    def wait_healthy(self, timeout_s: float = 30.0, names: Sequence[str] | None = None) -> None:
        """Poll every child's health URLs until all answer 200; raise ``StartupError`` otherwise."""
        pending = {n: list(self.children[n].health_urls) for n in (names or self.children)}
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=1.0) as client:
            while pending:
                for name in list(pending):
                    child = self.children[name]
                    if not child.alive():
                        raise StartupError(f"{name} exited with {child.popen.returncode}:\n{child.log_tail()}")
                    pending[name] = [u for u in pending[name] if not _ok(client, u)]
                    if not pending[name]:
                        del pending[name]
                if not pending:
                    return
                if time.monotonic() > deadline:
                    tails = "\n".join(f"--- {n}: {self.children[n].log_tail(15)}" for n in pending)
                    raise StartupError(f"not healthy after {timeout_s:.0f} s: {sorted(pending)}\n{tails}")
                time.sleep(0.1)

    def kill(self, name: str) -> None:
        """SIGKILL one child and its process group (crash tests; a vLLM server's engine core dies with it)."""
        child = self.children[name]
        if child.alive():
            _kill_group(child)
            child.popen.wait(10)

    def stop(self, name: str, grace_s: float = 5.0) -> None:
        child = self.children[name]
        if child.alive():
            child.popen.send_signal(signal.SIGTERM)
            try:
                child.popen.wait(grace_s)
            except subprocess.TimeoutExpired:
                child.popen.kill()
                child.popen.wait(5)

    def stop_all(self, grace_s: float = 5.0) -> None:
        for child in self.children.values():
            if child.alive():
                child.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for child in self.children.values():
            try:
                child.popen.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _kill_group(child)
                child.popen.wait(5)
        for child in self.children.values():
            _reap_group(child)

    def __enter__(self) -> ProcessSet:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop_all()


def _kill_group(child: Child) -> None:
    """SIGKILL the child's session (it was started as its own session leader, so pgid = pid)."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        child.popen.kill()


def _reap_group(child: Child) -> None:
    """SIGKILL what is left of a stopped child's session (e.g. a worker process its leader did not stop)."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _ok(client: httpx.Client, url: str) -> bool:
    try:
        return client.get(url).status_code == 200
    except httpx.HTTPError:
        return False
