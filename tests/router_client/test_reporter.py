"""Sample reporter: flushes to the trainer, keeps rows while it is away (bounded, drop-oldest), drops 422s."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from prometheus_client import CollectorRegistry

from router_client.config import ReporterConfig
from router_client.live_metrics import RouterMetrics
from router_client.reporter import SampleReporter


def row(i: int) -> dict[str, Any]:
    return {"input_token_length": i, "actual_ttft_ms": 10.0, "actual_tpot_ms": 1.0}


async def _run(trainers: dict[str, str | None], body: Any, **cfg: Any) -> Any:
    async with httpx.AsyncClient() as http:
        metrics = RouterMetrics(CollectorRegistry())
        rep = SampleReporter(http, trainers, ReporterConfig(**cfg), metrics)
        return await body(rep, metrics)


def _sample_count(metrics: RouterMetrics, pool: str, outcome: str) -> float:
    return metrics.samples.labels(pool, outcome)._value.get()


def test_flush_sends_oldest_first_in_bounded_batches(kit: Any, fake_trainer: tuple[Any, str]) -> None:
    ft, url = fake_trainer

    async def body(rep: SampleReporter, metrics: RouterMetrics) -> tuple[int, float]:
        for i in range(25):
            rep.add("p", row(i))
        await rep.flush()
        return rep.buffered("p"), _sample_count(metrics, "p", "sent")

    left, sent = asyncio.run(_run({"p": url}, body, max_flush_rows=10))
    assert left == 15 and sent == 10
    assert [e["input_token_length"] for e in ft.entries] == list(range(10))


def test_trainer_down_keeps_bounded_buffer_then_recovers(kit: Any) -> None:
    ft = kit.FakeTrainer(status=500)
    with kit.serve(ft.app()) as url:
        async def body(rep: SampleReporter, metrics: RouterMetrics) -> tuple[int, float, int]:
            for i in range(8):
                rep.add("p", row(i))
            await rep.flush()  # 500: rows kept
            for i in range(8, 12):
                rep.add("p", row(i))  # buffer of 10: the two oldest go
            kept = rep.buffered("p")
            ft.status = 202
            await rep.flush()
            return kept, _sample_count(metrics, "p", "dropped_buffer_full"), rep.buffered("p")

        kept, dropped, left = asyncio.run(_run({"p": url}, body, max_buffer_rows=10))
    assert kept == 10 and dropped == 2 and left == 0
    assert [e["input_token_length"] for e in ft.entries] == list(range(2, 12))


def test_unreachable_trainer_and_422(kit: Any) -> None:
    dead = f"http://127.0.0.1:{kit.free_port()}"
    ft = kit.FakeTrainer(status=422)
    with kit.serve(ft.app()) as url:
        async def body(rep: SampleReporter, metrics: RouterMetrics) -> tuple[int, int, float]:
            rep.add("down", row(1))
            rep.add("bad", row(2))
            rep.add("none", row(3))
            await rep.flush()
            return (rep.buffered("down"), rep.buffered("bad"), _sample_count(metrics, "bad", "rejected")
                    + _sample_count(metrics, "none", "no_trainer"))

        down, bad, counted = asyncio.run(_run({"down": dead, "bad": url, "none": None}, body))
    assert down == 1 and bad == 0 and counted == 2
