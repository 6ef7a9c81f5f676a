"""The engines shared by every policy: started once, warmed up, and between policies drained and emptied."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx
import orjson

from demo.engine import EngineSpec, reset_prefix_caches
from demo.prom import metric_value

VLLM_CPU_BLOCK_SIZE = 128
"""The CPU build's KV block size (its default; not a flag here): prefix-cache hits come in 128-token blocks."""


def describe(spec: EngineSpec, count: int) -> dict[str, Any]:
    """The ``engines`` section of the output: count, model, its shape, the engine settings."""
    info_path = spec.model_dir / "tiny_model.json"
    shape = orjson.loads(info_path.read_bytes()) if info_path.is_file() else None
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(spec).items()}
    settings["block_size"] = VLLM_CPU_BLOCK_SIZE
    settings["cores_per_engine"] = 1
    return {"count": count, "model": str(spec.model_dir), "shape": shape, "settings": settings}


def vocab(spec: EngineSpec) -> int:
    info_path = spec.model_dir / "tiny_model.json"
    return int(orjson.loads(info_path.read_bytes())["vocab"]) if info_path.is_file() else 8192


def warm_up(urls: Sequence[str], served_name: str, timeout_s: float = 120.0) -> None:
    """One short completion per engine (first-request costs are not charged to the first policy)."""
    body = {"model": served_name, "prompt": list(range(3, 67)), "max_tokens": 4, "ignore_eos": True}
    with httpx.Client(timeout=timeout_s) as client:
        for url in urls:
            resp = client.post(url + "/v1/completions", json=body)
            if resp.status_code != 200:
                raise RuntimeError(f"{url} warm-up answered {resp.status_code}: {resp.text[:200]}")


def busy(client: httpx.Client, url: str) -> float:
    text = client.get(url + "/metrics").text
    return metric_value(text, "vllm:num_requests_running") + metric_value(text, "vllm:num_requests_waiting")


def wait_idle(urls: Sequence[str], timeout_s: float = 120.0) -> None:
    """Until no engine runs or queues a request (aborted streams take a step to free); raises on timeout."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=5.0) as client:
        while any(busy(client, url) > 0 for url in urls):
            if time.monotonic() > deadline:
                raise RuntimeError(f"engines still busy after {timeout_s:.0f} s")
            time.sleep(0.5)


def fresh_state(urls: Sequence[str]) -> None:
    """Drained and prefix caches emptied: the next policy starts from the same engine state."""
    wait_idle(urls)
    reset_prefix_caches(urls)
