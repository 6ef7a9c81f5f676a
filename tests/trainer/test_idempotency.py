"""Idempotent ingest: a retried batch (same Idempotency-Key) is stored once and acknowledged with the same body,
across a restart and across ``kill -9`` of a real subprocess trainer."""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.procs import SMALL_TRAINER, free_port, spawn, stop, wait_ready
from tests.trainer.conftest import mixed_rows


def post(client: Any, rows: list[dict[str, Any]], key: str | None, query: str = "") -> Any:
    headers = {"content-type": "application/json", **({"Idempotency-Key": key} if key else {})}
    return client.post(f"/add_training_data_bulk{query}", content=json.dumps({"entries": rows}), headers=headers)


def durable(client: Any) -> int:
    return int(client.get("/data/status").json()["durable"]["rows"])


def test_retry_is_stored_once_and_acknowledged_again(client: TestClient) -> None:
    rows = mixed_rows(40)
    first = post(client, rows, "batch-1")
    again = post(client, rows, "batch-1")
    assert first.status_code == again.status_code == 202
    assert first.content == again.content and again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert durable(client) == 40
    assert post(client, rows, None).status_code == 202 and durable(client) == 80  # no key: stored again
    assert 'trainer_ingest_requests_total{outcome="replayed"} 1.0' in client.get("/metrics").text


def test_partial_retry_gives_the_same_body(client: TestClient) -> None:
    rows = mixed_rows(10)
    rows[3]["kv_cache_percentage"] = 7
    first = post(client, rows, "p-1", "?partial=true")
    again = post(client, rows, "p-1", "?partial=true")
    assert first.status_code == 202 and first.json()["accepted"] == 9
    assert again.json() == first.json() and durable(client) == 9


def test_same_key_other_body_is_a_422(client: TestClient) -> None:
    assert post(client, mixed_rows(5), "k").status_code == 202
    other = post(client, mixed_rows(5, seed=9), "k")
    assert other.status_code == 422 and other.json()["detail"][0]["loc"] == ["header", "Idempotency-Key"]
    assert durable(client) == 5


@pytest.mark.parametrize("key", [b"", b"with space", b"x" * 256, "é".encode()])
def test_malformed_keys_are_422(client: TestClient, key: bytes) -> None:
    response = client.post("/add_training_data_bulk", content=b'{"entries": []}', headers={"Idempotency-Key": key})
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["header", "Idempotency-Key"]


def test_a_batch_that_stored_nothing_leaves_no_key(client: TestClient) -> None:
    bad = mixed_rows(3)
    bad[0]["kv_cache_percentage"] = -1
    assert post(client, bad, "k").status_code == 422
    assert post(client, mixed_rows(3), "k").status_code == 202 and durable(client) == 3


def test_the_window_is_bounded_by_count(client_factory: Callable[..., TestClient]) -> None:
    c = client_factory(idempotency_keys=2)
    for key in ("a", "b", "c"):
        post(c, mixed_rows(2, seed=ord(key)), key)
    post(c, mixed_rows(2, seed=ord("a")), "a")  # forgotten: stored again
    post(c, mixed_rows(2, seed=ord("c")), "c")  # remembered
    assert durable(c) == 8


def test_keys_survive_a_restart(client_factory: Callable[..., TestClient]) -> None:
    rows = mixed_rows(30)
    first = client_factory()
    response = post(first, rows, "restart-1")
    first.__exit__(None, None, None)  # stop (the ack is treated as lost)
    second = client_factory()
    assert durable(second) == 30
    assert post(second, rows, "restart-1").content == response.content
    assert durable(second) == 30


def test_kill_9_between_store_and_ack_does_not_duplicate(tmp_path: Path) -> None:
    """Four clients post keyed batches; SIGKILL mid-flight; after a restart each client retries every batch it
    saw no 202 for, with the same key. Every batch must be stored exactly once."""
    port, data = free_port(), tmp_path / "data"
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "trainer.log"
    env = {**SMALL_TRAINER}
    args = ["--host", "127.0.0.1", "--port", str(port), "--data-dir", str(data)]
    proc = spawn("trainer", args, env, log)
    wait_ready(url, proc, log)
    rows_per_batch = 500
    acked: list[str] = []
    unacked: dict[str, list[dict[str, Any]]] = {}
    lock, stop_flag = threading.Lock(), threading.Event()

    def client(n: int) -> None:
        with httpx.Client(base_url=url, timeout=10) as c:
            for i in range(10_000):
                if stop_flag.is_set():
                    return
                key, rows = f"c{n}-{i}-{uuid.uuid4().hex[:6]}", mixed_rows(rows_per_batch, seed=n * 1000 + i)
                try:
                    ok = post(c, rows, key).status_code == 202
                except httpx.TransportError:
                    ok = False
                with lock:
                    (acked.append(key) if ok else unacked.__setitem__(key, rows))
                if not ok:
                    return

    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while len(acked) < 40 and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    stop_flag.set()
    for t in threads:
        t.join(30)
    assert len(acked) >= 40, "clients made no progress before the kill"
    proc = spawn("trainer", args, env, log)
    try:
        wait_ready(url, proc, log)
        with httpx.Client(base_url=url, timeout=30) as c:
            stored_before_retry = durable(c)
            assert stored_before_retry >= len(acked) * rows_per_batch  # acknowledged = durable
            for key, rows in unacked.items():
                assert post(c, rows, key).status_code == 202
            assert durable(c) == (len(acked) + len(unacked)) * rows_per_batch
    finally:
        stop(proc)
