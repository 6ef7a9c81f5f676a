"""Real server subprocesses on 127.0.0.1 for integration tests: start, wait until ready, read peak RSS, kill.

``free_port`` is the one the tests use (``demo.procs``' own).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx

from demo.procs import free_port as free_port
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[1]
QUIET = {"LATENCY_LOG_LEVEL": "WARNING"}
SMALL_TRAINER = {"LATENCY_RETRAINING_INTERVAL_SEC": "3600", "LATENCY_XGB_N_ESTIMATORS": "20",
                 "LATENCY_TRAIN_THREADS": "1"}


def spawn(module: str, args: list[str], env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    """``python -m module args`` with ``env`` added to ours; stdout+stderr go to ``log``."""
    full = {**os.environ, **QUIET, **env}
    for name in [k for k in full if k.startswith(("LATENCY_", "PREDICT_", "TRAINING_")) and k not in env
                 and k not in QUIET]:
        del full[name]  # nothing from the developer's shell leaks into the server under test
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", module, *args], cwd=REPO, env=full, stdout=out,
                                stderr=subprocess.STDOUT)


def wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path, path: str = "/readyz",
               timeout: float = 60.0) -> float:
    """Seconds until ``GET url+path`` answers 200 (AssertionError, with the server's log, otherwise)."""
    start = time.monotonic()
    client = httpx.Client(timeout=2)  # one client: each httpx.get builds an SSL context (~6 % of the suite's CPU)

    def ready() -> bool:
        assert proc.poll() is None, f"server exited ({proc.returncode}):\n{log.read_text()[-3000:]}"
        try:
            return client.get(url + path).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(ready, timeout, interval=0.05, what=f"{url}{path} ready")
    except AssertionError as exc:
        raise AssertionError(f"{exc}:\n{log.read_text()[-3000:]}") from None
    finally:
        client.close()
    return time.monotonic() - start


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@contextmanager
def trainer(data_dir: Path, env: Mapping[str, str] | None = None, port: int | None = None
            ) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A ``python -m trainer`` on loopback (small, no periodic retrain unless ``env`` says so)."""
    port = port or free_port()
    log = data_dir.parent / f"trainer-{port}.log"
    proc = spawn("trainer", ["--host", "127.0.0.1", "--port", str(port), "--data-dir", str(data_dir)],
                 {**SMALL_TRAINER, **(env or {})}, log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, log)
        yield url, proc
    finally:
        stop(proc)


def peak_rss_kib(pid: int) -> int:
    """VmHWM (peak resident set) of a live process, KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM for pid {pid}")


@contextmanager
def predictor(workdir: Path, source_args: list[str], env: Mapping[str, str] | None = None, port: int | None = None,
              ready_path: str = "/readyz") -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A ``python -m predictor`` on loopback; ``source_args`` is ``--training-url URL`` or ``--bundle-dir DIR``."""
    port = port or free_port()
    log = workdir / f"predictor-{port}.log"
    base = {"LOCAL_MODEL_DIR": str(workdir / "local"), "MODEL_SYNC_INTERVAL_SEC": "0.5", "HTTP_TIMEOUT": "5"}
    proc = spawn("predictor", ["--host", "127.0.0.1", "--port", str(port), *source_args], {**base, **(env or {})},
                 log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, log, ready_path)
        yield url, proc
    finally:
        stop(proc)
