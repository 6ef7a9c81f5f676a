"""Small helpers of the engine tests: token prompts, streamed completions through the proxy, engine metrics."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

POOL = "engine"
MAX_MODEL_LEN = 4096
MODEL = "tiny"
VOCAB = 8192


def tokens(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, VOCAB) for _ in range(n)]


@dataclass
class Streamed:
    status: int
    headers: dict[str, str]
    events: list[bytes] = field(default_factory=list)
    body: bytes = b""

    def chunks(self) -> list[dict[str, Any]]:
        return [orjson.loads(e) for e in self.events if e != b"[DONE]"]

    def text_chunks(self) -> int:
        return sum(1 for c in self.chunks() if c.get("choices") and c["choices"][0].get("text"))


def stream(client: httpx.Client, url: str, prompt: list[int], max_tokens: int, request_id: str,
           include_usage: bool = False) -> Streamed:
    body: dict[str, Any] = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True,
                            "stream": True}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    with client.stream("POST", url + "/v1/completions", json=body, headers={"x-request-id": request_id}) as resp:
        out = Streamed(resp.status_code, dict(resp.headers))
        if resp.status_code != 200:
            out.body = resp.read()
            return out
        for line in resp.iter_lines():
            if line.startswith("data: "):
                out.events.append(line[6:].encode())
    return out


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")


def metric_sum(text: str, name: str) -> float:
    """Sum of every sample of ``name`` (all label sets) in a Prometheus text page."""
    total = 0.0
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and match.group(1) == name:
            total += float(match.group(3))
    return total


def engine_metrics(client: httpx.Client, urls: list[str], names: tuple[str, ...]) -> dict[str, dict[str, float]]:
    out = {}
    for url in urls:
        text = client.get(url + "/metrics").text
        out[url] = {n: metric_sum(text, n) for n in names}
    return out


def router_records(client: httpx.Client, router_url: str, request_ids: set[str]) -> list[dict[str, Any]]:
    data = client.get(router_url + "/ui/requests", params={"limit": 5000}).json()
    return [r for r in data["requests"] if r["request_id"] in request_ids]
