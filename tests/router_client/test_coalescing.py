"""Opportunistic coalescing of the predictor client, over real HTTP on 127.0.0.1.

The predictor side is either a tiny asyncio HTTP/1.1 server in the test (the external boundary,
scripted per call: delay, status, body) or the real ``python -m predictor`` serving a tiny real
XGBoost bundle from tmp_path.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest
import xgboost as xgb

from router_client.errors import PredictionUnavailable
from router_client.predictor_client import Prediction, PredictorClient
from shared.bundle import build_manifest, write_bundle
from shared.columns import to_columns
from shared.features import MODEL_NAMES, FeatureSpec
from shared.timefmt import rfc3339

REPO = Path(__file__).resolve().parents[2]
LOOPBACK = "127.0.0.1"


def row(i: int, running: int = 0) -> dict[str, Any]:
    return {"kv_cache_percentage": 0.1, "input_token_length": 10 * i, "num_request_waiting": 0,
            "num_request_running": running, "num_tokens_generated": 0, "prefix_cache_score": 0.0}


def expected(r: dict[str, Any]) -> Prediction:
    """What :class:`ScriptedPredictor` answers for a row."""
    return Prediction(float(r["input_token_length"]) + 0.5, float(r["num_request_running"]) + 1.0)


@dataclass
class ScriptedPredictor:
    """``POST /predict/bulk/strict`` on a raw asyncio server. ``delays[k]`` / ``statuses[k]`` apply to
    the k-th call (then 0 s / 200); ``calls`` holds the row count of every call, in arrival order."""

    delays: list[float] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)
    connections: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                rows = orjson.loads(await reader.readexactly(length))["requests"]
                k = len(self.calls)
                self.calls.append(len(rows))
                if k < len(self.delays):
                    await asyncio.sleep(self.delays[k])
                status = self.statuses[k] if k < len(self.statuses) else 200
                answers = [{"ttft_ms": p.ttft_ms, "tpot_ms": p.tpot_ms} for p in map(expected, rows)]
                body = orjson.dumps({"predictions": answers})
                writer.write(b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b"
                             % (status, len(body), body))
                await writer.drain()
        writer.close()


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(main(), 20))  # type: ignore[arg-type]


async def serve(pred: ScriptedPredictor) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(pred.handle, LOOPBACK, 0)
    return server, f"http://{LOOPBACK}:{server.sockets[0].getsockname()[1]}"


def client(urls: list[str], *, timeout_s: float = 2.0, window_s: float = 0.0, max_rows: int = 10000,
           backoff_s: float = 1.0) -> PredictorClient:
    return PredictorClient(None, urls, timeout_s=timeout_s, window_s=window_s, max_rows=max_rows,
                           backoff_s=backoff_s, clock=time.monotonic)


async def outcome(c: PredictorClient, rows: list[dict[str, Any]], budget_s: float) -> list[Prediction] | str:
    try:
        return await c.predict(rows, time.monotonic() + budget_s)
    except PredictionUnavailable as exc:
        return exc.reason


def test_lone_decisions_are_sent_at_once_on_one_connection() -> None:
    async def main() -> None:
        pred = ScriptedPredictor()
        server, url = await serve(pred)
        c = client([url])
        for i in range(5):
            rows = [row(i), row(i + 100, running=3)]
            assert await c.predict(rows, time.monotonic() + 2.0) == [expected(r) for r in rows]
        assert pred.calls == [2] * 5 and c.calls == 5 and pred.connections == 1
        await c.aclose()
        server.close()

    run(main)


def test_concurrent_decisions_share_calls_and_get_their_own_rows_in_order() -> None:
    async def main() -> None:
        pred = ScriptedPredictor(delays=[0.05])
        server, url = await serve(pred)
        c = client([url])
        decisions = [[row(100 * d + k, running=d) for k in range(1 + d % 4)] for d in range(20)]
        results = await asyncio.gather(*(c.predict(rows, time.monotonic() + 2.0) for rows in decisions))
        for rows, got in zip(decisions, results, strict=True):
            assert got == [expected(r) for r in rows]
        # the first decision goes out alone; the 19 that arrive while it is in flight share the next call
        assert pred.calls == [1, sum(len(r) for r in decisions[1:])] and c.calls == 2
        await c.aclose()
        server.close()

    run(main)


def test_waves_arriving_during_a_call_are_batched_behind_it() -> None:
    async def main() -> None:
        pred = ScriptedPredictor(delays=[0.1, 0.1])
        server, url = await serve(pred)
        c = client([url])

        async def later(delay: float, i: int) -> list[Prediction] | str:
            await asyncio.sleep(delay)
            return await outcome(c, [row(i), row(i + 1)], 2.0)

        results = await asyncio.gather(*(later(0.0 if i == 0 else 0.02 + 0.005 * i, 10 * i) for i in range(8)))
        assert results == [[expected(row(10 * i)), expected(row(10 * i + 1))] for i in range(8)]
        assert pred.calls == [2, 14] and c.calls == 2
        await c.aclose()
        server.close()

    run(main)


def test_row_cap_splits_a_queued_batch() -> None:
    async def main() -> None:
        pred = ScriptedPredictor(delays=[0.05])
        server, url = await serve(pred)
        c = client([url], max_rows=8)
        decisions = [[row(10 * d + k) for k in range(4)] for d in range(16)]
        results = await asyncio.gather(*(c.predict(rows, time.monotonic() + 2.0) for rows in decisions))
        assert all(got == [expected(r) for r in rows] for rows, got in zip(decisions, results, strict=True))
        assert max(pred.calls) <= 8 and sum(pred.calls) == 64 and len(pred.calls) < 16
        await c.aclose()
        server.close()

    run(main)


def test_slow_predictor_times_out_each_decision_at_its_own_deadline() -> None:
    async def main() -> None:
        pred = ScriptedPredictor(delays=[1.0, 1.0])
        server, url = await serve(pred)
        c = client([url])
        started = time.monotonic()

        async def timed(budget_s: float, i: int) -> tuple[list[Prediction] | str, float]:
            got = await outcome(c, [row(i)], budget_s)
            return got, time.monotonic() - started

        # the first is in flight, the other two queue behind it; each gives up at its own budget
        budgets = (0.3, 0.05, 0.1)
        results = await asyncio.gather(*(timed(b, i) for i, b in enumerate(budgets)))
        assert [r for r, _ in results] == ["timeout"] * 3
        for (_, elapsed), budget in zip(results, budgets, strict=True):
            assert budget <= elapsed < budget + 0.5
        assert pred.calls == [1]  # queued decisions that gave up are never sent
        await c.aclose()
        server.close()

    run(main)


def test_an_abandoned_slow_call_does_not_hold_back_the_next_decision() -> None:
    async def main() -> None:
        pred = ScriptedPredictor(delays=[1.5])
        server, url = await serve(pred)
        c = client([url], timeout_s=5.0)
        assert await outcome(c, [row(1)], 0.05) == "timeout"  # its call is still in flight at the server
        started = time.monotonic()
        assert await outcome(c, [row(2)], 1.0) == [expected(row(2))]
        assert time.monotonic() - started < 1.0 and pred.calls == [1, 1]
        await c.aclose()
        server.close()

    run(main)


def test_cancelled_decisions_are_dropped_and_release_the_queue() -> None:
    async def main() -> None:
        pred = ScriptedPredictor(delays=[1.5])
        server, url = await serve(pred)
        c = client([url], timeout_s=5.0)
        first = asyncio.create_task(c.predict([row(1)], time.monotonic() + 5.0))
        await asyncio.sleep(0.05)
        queued = asyncio.create_task(c.predict([row(2), row(3)], time.monotonic() + 5.0))
        await asyncio.sleep(0.05)
        queued.cancel()  # client went away while queued: its rows are never sent
        first.cancel()  # the only waiter of the in-flight call: the call no longer blocks the queue
        for task in (first, queued):
            with pytest.raises(asyncio.CancelledError):
                await task
        assert await outcome(c, [row(4)], 1.0) == [expected(row(4))]
        assert pred.calls == [1, 1]
        await c.aclose()
        server.close()

    run(main)


def test_a_failed_call_fails_every_decision_in_it_and_counts_the_reason() -> None:
    async def main() -> None:
        pred = ScriptedPredictor(delays=[0.05], statuses=[200, 503])
        server, url = await serve(pred)
        c = client([url], backoff_s=0.0)
        results = await asyncio.gather(*(outcome(c, [row(i)], 2.0) for i in range(6)))
        assert results == [[expected(row(0))]] + ["status"] * 5  # all-or-nothing per call
        assert await outcome(c, [row(9)], 2.0) == [expected(row(9))]
        await c.aclose()
        server.close()

    run(main)


def test_failover_to_the_next_url_after_a_refused_connection() -> None:
    async def main() -> None:
        pred = ScriptedPredictor()
        server, url = await serve(pred)
        dead_server = await asyncio.start_server(lambda r, w: None, LOOPBACK, 0)
        dead = f"http://{LOOPBACK}:{dead_server.sockets[0].getsockname()[1]}"
        dead_server.close()
        await dead_server.wait_closed()
        c = client([dead, url], backoff_s=10.0)
        results = [await outcome(c, [row(i)], 2.0) for i in range(4)]
        assert results[0] == "error" and results[1:] == [[expected(row(i))] for i in range(1, 4)]
        assert pred.calls == [1, 1, 1]
        await c.aclose()
        server.close()

    run(main)


def test_optional_window_waits_for_company() -> None:
    async def main() -> None:
        pred = ScriptedPredictor()
        server, url = await serve(pred)
        c = client([url], window_s=0.05)

        async def later(i: int) -> list[Prediction] | str:
            await asyncio.sleep(0.005 * i)
            return await outcome(c, [row(i)], 2.0)

        results = await asyncio.gather(*(later(i) for i in range(5)))
        assert results == [[expected(row(i))] for i in range(5)] and pred.calls == [5]
        await c.aclose()
        server.close()

    run(main)


# -- the real predictor -------------------------------------------------------------------------
def _bundle(root: Path) -> None:
    """A tiny real XGBoost TTFT + TPOT bundle v1 (random rows, a handful of trees)."""
    spec = FeatureSpec()
    rng = np.random.default_rng(0)
    rows = [{"kv_cache_percentage": float(rng.random()), "input_token_length": int(rng.integers(0, 4000)),
             "num_request_waiting": int(rng.integers(0, 5)), "num_request_running": int(rng.integers(0, 30)),
             "num_tokens_generated": 0, "prefix_cache_score": float(rng.random())} for _ in range(300)]
    cols = to_columns(rows, ["body", "requests"])
    files, models = {}, {}
    for name in MODEL_NAMES:
        label = cols["input_token_length"] * 0.02 + cols["num_request_running"] * (3 if name == "ttft" else 0.4)
        booster = xgb.train({"objective": "reg:squarederror", "max_depth": 3, "nthread": 1, "seed": 0},
                            xgb.DMatrix(spec.matrix(name, cols), label=label), 5)
        files[f"{name}.ubj"] = bytes(booster.save_raw("ubj"))
        models[name] = {"file": f"{name}.ubj", "features": list(spec.columns(name)), "quantiles": [0.9],
                        "calibration": {"scale": 1.0, "offset": 0.0}, "training_rows": 300, "holdout_rows": 0,
                        "metrics": {}}
    meta = {"feature_flags": spec.as_dict(), "model_type": "xgboost", "objective_type": "quantile",
            "quantile": 0.9, "prior": False}
    write_bundle(root, build_manifest(1, rfc3339(), models, files, meta, None), files)


@pytest.fixture(scope="module")
def real_predictor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("coalescing")
    root = tmp / "bundles"
    root.mkdir()
    _bundle(root)
    with contextlib.closing(__import__("socket").socket()) as s:
        s.bind((LOOPBACK, 0))
        port = s.getsockname()[1]
    url = f"http://{LOOPBACK}:{port}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "LATENCY_LOG_LEVEL": "WARNING"}
    with open(tmp / "predictor.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "predictor", "--host", LOOPBACK, "--port", str(port),
                                 "--bundle-dir", str(root)], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            while True:
                assert proc.poll() is None and time.monotonic() < deadline, (tmp / "predictor.log").read_text()
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(url + "/readyz", timeout=1.0).status_code == 200:
                        break
                time.sleep(0.1)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def test_real_predictor_coalesced_answers_equal_lone_answers(real_predictor: str) -> None:
    async def main() -> None:
        c = client([real_predictor])
        decisions = [[row(37 * d + k, running=(d + k) % 7) for k in range(1 + d % 3)] for d in range(12)]
        alone = [await c.predict(rows, time.monotonic() + 5.0) for rows in decisions]
        assert c.calls == 12
        together = await asyncio.gather(*(c.predict(rows, time.monotonic() + 5.0) for rows in decisions))
        assert list(together) == alone  # positional split: every decision got its own rows back, in order
        assert c.calls - 12 < 12
        assert len({p for rows in alone for p in rows}) > 1  # the rows really differ
        await c.aclose()

    run(main)


def test_rows_that_cannot_be_encoded_fall_back_with_error() -> None:
    async def main() -> None:
        pred = ScriptedPredictor()
        server, url = await serve(pred)
        c = client([url])
        assert await outcome(c, [{**row(1), "kv_cache_percentage": object()}], 1.0) == "error"
        assert await outcome(c, [row(2)], 1.0) == [expected(row(2))] and pred.calls == [1]
        await c.aclose()
        server.close()

    run(main)
