"""Over real HTTP on loopback: the library in front of sim pods (two pools) with a real trainer and a real
predictor per pool (subprocesses, as deployed). A decision per request, samples reach the trainers, a
retrain changes what the router predicts for the same request and endpoint state."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from router_client.config import RouterConfig
from router_client.router import Decision, RequestInfo, Router
from sim.engine.config import EngineConfig
from sim.pod.config import PodConfig
from sim.pod.launch import run_pods

REPO = Path(__file__).resolve().parents[2]
SYSTEM = "You are a careful assistant who answers briefly. " * 8
ENV = {"LATENCY_RETRAINING_INTERVAL_SEC": "1", "LATENCY_MIN_SAMPLES_FOR_RETRAIN": "20",
       "LATENCY_XGB_N_ESTIMATORS": "20", "LATENCY_TRAIN_THREADS": "1",
       "MODEL_SYNC_INTERVAL_SEC": "1", "LATENCY_LOG_LEVEL": "WARNING"}


def _wait_http(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{url}: process exited with {proc.returncode}"
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        time.sleep(0.1)
    raise AssertionError(f"{url} not healthy within {timeout_s} s")


class Processes:
    """Subprocesses started as deployed; stopped together (SIGTERM to all, then wait, then SIGKILL)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Any] = []

        self.health: list[str] = []

    def start(self, args: list[str], health: str, name: str) -> None:
        log = open(self.tmp / f"{name}.log", "wb")  # noqa: SIM115 - closed in stop()
        self.logs.append(log)
        proc = subprocess.Popen([sys.executable, "-m", *args], cwd=REPO, env={**os.environ, **ENV}, stdout=log,
                                stderr=subprocess.STDOUT)
        self.procs.append(proc)
        self.health.append(health)

    def wait_healthy(self) -> None:
        for proc, url in zip(self.procs, self.health, strict=True):
            _wait_http(url, proc)

    def stop(self) -> None:
        """Predictors first (they hold long-polls on their trainer), then trainers."""
        for proc in reversed(self.procs):
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        for log in self.logs:
            log.close()


def _port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Sim pods (short: 2 × 4k context, long: 1 × 32k) in a thread; trainer + predictor per pool."""
    tmp = tmp_path_factory.mktemp("stack")
    engine = {"short": EngineConfig.from_preset("llama3-8b-a100", max_model_len=4096),
              "long": EngineConfig.from_preset("llama3-8b-a100", max_model_len=32768)}
    configs = [PodConfig(engine=engine["short"], time_scale=0.05, pool="short") for _ in range(2)]
    configs.append(PodConfig(engine=engine["long"], time_scale=0.05, pool="long"))
    procs = Processes(tmp)
    with contextlib.ExitStack() as es:
        es.callback(procs.stop)
        pods = es.enter_context(run_pods(configs, shutdown_timeout_s=3.0))
        pools = []
        for name, urls in (("short", pods.urls[:2]), ("long", pods.urls[2:])):
            tport, pport = _port(), _port()
            turl, purl = f"http://127.0.0.1:{tport}", f"http://127.0.0.1:{pport}"
            procs.start(["trainer", "--host", "127.0.0.1", "--port", str(tport), "--data-dir",
                         str(tmp / f"trainer-{name}")], turl + "/healthz", f"trainer-{name}")
            procs.start(["predictor", "--host", "127.0.0.1", "--port", str(pport), "--training-url", turl],
                        purl + "/healthz", f"predictor-{name}")
            pools.append({"name": name, "pods": urls, "max_context": engine[name].max_model_len,
                          "trainer_url": turl, "predictor_urls": [purl]})
        procs.wait_healthy()
        yield {"pools": pools, "tmp": tmp}


async def _stream(http: httpx.AsyncClient, router: Router, d: Decision, body: dict[str, Any]) -> None:
    """Send the request where the router said, time the stream, report back to the router."""
    assert d.pod_url is not None
    start = time.monotonic()
    first: float | None = None
    tokens, prompt_tokens = 0, None
    async with http.stream("POST", d.pod_url + "/v1/completions", json=body) as resp:
        assert resp.status_code == 200
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = orjson.loads(line[6:])
            if chunk.get("usage"):
                prompt_tokens = chunk["usage"]["prompt_tokens"]
            if chunk.get("choices"):
                tokens += 1
                if first is None:
                    first = time.monotonic()
                    router.on_first_token(d)
    end = time.monotonic()
    assert first is not None
    router.on_complete(d, (first - start) * 1e3, (end - start) * 1e3, tokens, prompt_tokens)


def _request(i: int, long: bool) -> tuple[RequestInfo, dict[str, Any]]:
    words = 2600 if long else 50 + 37 * (i % 9)  # long: > 2048 budget tokens → long pool ("total")
    prompt = SYSTEM + f"Question {i}: " + "why " * words
    max_tokens = 100 if long else 24
    body = {"model": "m", "prompt": prompt, "max_tokens": max_tokens, "output_tokens": 40 if long else 1 + i % 24,
            "stream": True, "stream_options": {"include_usage": True}}
    raw = orjson.dumps(body)
    info = RequestInfo("/v1/completions", len(raw), None, max_tokens, prompt, None, request_id=f"q{i}")
    return info, body


async def _traffic(router: Router, n: int, concurrency: int = 6) -> list[Decision]:
    sem = asyncio.Semaphore(concurrency)
    decisions: list[Decision] = []
    async with httpx.AsyncClient(timeout=30.0) as http:
        async def one(i: int) -> None:
            async with sem:
                info, body = _request(i, long=i % 8 == 0)
                d = await router.decide(info)
                decisions.append(d)
                await _stream(http, router, d, body)

        await asyncio.gather(*(one(i) for i in range(n)))
    return decisions


def _predictor_load(purl: str) -> Any:
    return httpx.get(purl + "/status", timeout=5).json().get("last_model_load")


def _trainer_rows(turl: str) -> int:
    data = httpx.get(turl + "/data/status", timeout=5).json()
    return int(data["training_data"]["total_samples"]) + int(data["test_data"]["total_samples"])


@pytest.mark.timeout(180)
def test_two_pools_decide_report_and_learn(stack: dict[str, Any]) -> None:
    cfg = RouterConfig.model_validate({
        "pools": stack["pools"], "predictor_timeout_ms": 1000, "predictor_http_timeout_ms": 2000,
        "scraper": {"interval_s": 0.05}, "reporter": {"flush_interval_s": 0.2},
        "scheduler": {"seed": 3}})
    short, long = stack["pools"]
    probe, _ = _request(10_001, long=False)

    async def main() -> tuple[list[Decision], Decision, Decision, list[Any], list[int]]:
        router = Router(cfg)
        await router.start()
        try:
            await asyncio.sleep(0.3)
            before = await router.decide(probe)
            router.on_complete(before, 0.0, 0.0, 0, error=True)
            loads = [_predictor_load(p["predictor_urls"][0]) for p in (short, long)]
            decisions = await _traffic(router, 160)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # wait for a retrain to reach the short pool's predictor
                await asyncio.sleep(0.5)
                if _predictor_load(short["predictor_urls"][0]) not in (loads[0], None):
                    break
            await asyncio.sleep(0.5)
            after = await router.decide(probe)
            router.on_complete(after, 0.0, 0.0, 0, error=True)
            rows = [_trainer_rows(p["trainer_url"]) for p in (short, long)]
            return decisions, before, after, loads, rows
        finally:
            await router.aclose()

    decisions, before, after, loads, rows = asyncio.run(main())
    assert len(decisions) == 160 and not any(d.shed for d in decisions)
    for d in decisions:
        pool = short if d.pool == "short" else long
        assert d.pod_url in pool["pods"]
        assert (d.pool == "long") == (d.request_id in {f"q{i}" for i in range(0, 160, 8)})
    assert rows[0] >= 100 and rows[1] >= 15, rows  # samples reached each pool's trainer
    assert _predictor_load(short["predictor_urls"][0]) != loads[0], "no retrain reached the predictor"
    assert not after.fallback and after.predicted_ttft_ms is not None
    assert before.fallback or (before.predicted_ttft_ms, before.predicted_tpot_ms) != (
        after.predicted_ttft_ms, after.predicted_tpot_ms)
