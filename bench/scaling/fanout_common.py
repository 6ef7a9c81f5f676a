"""Shared by the parts of ``bench.scaling.fanout``: where results go, the defaults they measure at, and the
helpers that start a server process and store a part's figures."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import httpx
import numpy as np
import orjson

from bench.common import paths
from bench.common.paths import OUT, REPO

WORK = OUT / "fanout-work"
RESULTS = paths.RESULTS / "scaling" / "RESULTS-fanout.md"
HAND_MARKER = "<!-- written by hand below: kept when the benchmark rewrites the part above -->"
PARTS = ("bundle", "longpoll", "predictor", "scrape")
WAIT_S = 20.0  # PREDICT_LONG_POLL_WAIT_SEC default
CAP_ROWS = 100_000  # LATENCY_WINDOW_MAX_ROWS default (per model)


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: process exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} not ready after {timeout:g} s")


@contextmanager
def process(cmd: list[str], ready_url: str, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "LATENCY_LOG_LEVEL": "WARNING", **(env or {})},
                            stdout=subprocess.DEVNULL)
    try:
        wait_ready(ready_url, proc)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def save(part: str, data: dict[str, Any]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    data = {"part": part, "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cores": os.cpu_count(), **data}
    (OUT / f"fanout-{part}.json").write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))


def stats(values: Sequence[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64)
    if not len(a):
        return {"p50": float("nan"), "p90": float("nan"), "max": float("nan")}
    return {"p50": float(np.percentile(a, 50)), "p90": float(np.percentile(a, 90)), "max": float(a.max())}


def largest_bundle_run() -> dict[str, Any]:
    """The ``bundle`` part's run with the most rows per model (its data dir and bundle feed the other parts)."""
    bundle = orjson.loads((OUT / "fanout-bundle.json").read_bytes())
    run: dict[str, Any] = max(bundle["runs"], key=lambda r: r["rows_per_model"])
    return run
