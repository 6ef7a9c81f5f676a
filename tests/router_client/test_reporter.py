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


# --- trust boundary: token and Idempotency-Key against a real trainer -------------------------------------

class DroppingProxy:
    """A loopback HTTP/1.1 proxy to ``target`` that forwards each request but, while ``drop`` > 0, throws the
    trainer's answer away and hangs up: the client cannot know whether its batch was stored."""

    def __init__(self, target: str) -> None:
        import socket
        import threading

        self.target = target.removeprefix("http://").split(":")
        self.drop = 0
        self.keys: list[str | None] = []
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    @staticmethod
    def _read_message(conn: Any) -> bytes:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return data
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        while len(body) < length:
            body += conn.recv(65536)
        return head + b"\r\n\r\n" + body

    def _serve(self) -> None:
        import socket

        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with conn:
                while True:
                    request = self._read_message(conn)
                    if not request:
                        break
                    head = request.split(b"\r\n\r\n")[0].decode("latin-1").lower()
                    self.keys.append(next((ln.split(":", 1)[1].strip() for ln in head.split("\r\n")
                                           if ln.startswith("idempotency-key:")), None))
                    with socket.create_connection((self.target[0], int(self.target[1]))) as up:
                        up.sendall(request)
                        response = self._read_message(up)
                    if self.drop > 0:
                        self.drop -= 1
                        break  # hang up without an answer
                    conn.sendall(response)

    def close(self) -> None:
        self._sock.close()


def test_unknown_outcome_is_resent_with_the_same_key_and_stored_once(tmp_path: Any) -> None:
    import httpx as hx

    from tests.procs import trainer
    from tests.trainer.conftest import mixed_rows

    (tmp_path / "token").write_text("router-secret\n")
    with trainer(tmp_path / "data", {"LATENCY_WRITE_TOKEN": "router-secret"}) as (url, _):
        proxy = DroppingProxy(url)
        proxy.drop = 1
        try:
            async def body(rep: SampleReporter, metrics: RouterMetrics) -> int:
                for r in mixed_rows(30):
                    rep.add("p", r)
                await rep.flush()  # stored, answer lost
                pending = rep.buffered("p")
                rep.add("p", mixed_rows(1, seed=3)[0])  # arrives meanwhile: not part of the resent batch
                await rep.flush()  # same batch, same key: acknowledged, not stored again
                await rep.flush()  # the new row
                return pending

            pending = asyncio.run(_run({"p": proxy.url}, body, trainer_token_file=str(tmp_path / "token")))
        finally:
            proxy.close()
        durable = hx.get(f"{url}/data/status", timeout=10).json()["durable"]["rows"]
    assert pending == 30
    assert len(proxy.keys) == 3 and proxy.keys[0] == proxy.keys[1] != proxy.keys[2]
    assert durable == 31


def test_token_is_sent_and_a_wrong_one_keeps_the_rows(tmp_path: Any) -> None:
    from tests.procs import trainer
    from tests.trainer.conftest import mixed_rows

    with trainer(tmp_path / "data", {"LATENCY_WRITE_TOKEN": "good"}) as (url, _):
        async def wrong(rep: SampleReporter, metrics: RouterMetrics) -> int:
            rep.add("p", mixed_rows(1)[0])
            await rep.flush()
            return rep.buffered("p")

        async def right(rep: SampleReporter, metrics: RouterMetrics) -> float:
            rep.add("p", mixed_rows(1)[0])
            await rep.flush()
            return _sample_count(metrics, "p", "sent")

        assert asyncio.run(_run({"p": url}, wrong, trainer_token="bad")) == 1  # 403: kept for a retry
        assert asyncio.run(_run({"p": url}, right, trainer_token="good")) == 1


def test_config_refuses_token_and_token_file_together() -> None:
    import pytest

    from router_client.config import RouterConfig
    from router_client.errors import RouterConfigError

    with pytest.raises(RouterConfigError, match="trainer_token or reporter.trainer_token_file"):
        RouterConfig.parse({"pools": [{"name": "a", "pods": ["http://x:1"]}],
                            "reporter": {"trainer_token": "a", "trainer_token_file": "/f"}})
    cfg = RouterConfig.parse({"pools": [{"name": "a", "pods": ["http://x:1"]}],
                              "reporter": {"trainer_token": "s3cr3t-value"}})
    assert "s3cr3t-value" not in repr(cfg)
