"""The trainer's trust boundary on a real subprocess server on loopback: tokens, byte and depth limits.

One trainer with a write token (from a file, as a Kubernetes Secret mount) and a read token serves
most tests; a second one without tokens checks the open default and its one warning line.
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.procs import peak_rss_kib, trainer
from tests.trainer.conftest import mixed_rows
from tests.waiting import wait_for

WRITE, READ = "w-" + "1" * 30, "r-" + "2" * 30
LIMIT_MB = 50


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any, Path]]:
    root = tmp_path_factory.mktemp("guarded")
    token_file = root / "write-token"
    token_file.write_text(WRITE + "\n")
    env = {"LATENCY_WRITE_TOKEN_FILE": str(token_file), "LATENCY_READ_TOKEN": READ,
           "LATENCY_MAX_INGEST_BYTES": str(2 << 20)}
    with trainer(root / "data", env) as (url, proc):
        yield url, proc, token_file


def entries(n: int = 20, seed: int = 0) -> bytes:
    return json.dumps({"entries": mixed_rows(n, seed)}).encode()


def durable_rows(url: str) -> int:
    return int(httpx.get(f"{url}/data/status", timeout=10).json()["durable"]["rows"])


@pytest.mark.parametrize("path", ["/add_training_data_bulk", "/add_training_data_bulk?partial=true", "/flush"])
def test_every_write_needs_the_write_token(guarded: tuple[str, Any, Path], path: str) -> None:
    url, _, _ = guarded
    body = entries() if path.startswith("/add") else b"{}"
    before = durable_rows(url)
    missing = httpx.post(url + path, content=body, timeout=10)
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    assert "detail" in missing.json()
    for wrong in ("nope", READ):  # the read token does not write
        assert httpx.post(url + path, content=body, headers=auth(wrong), timeout=10).status_code == 403
    assert durable_rows(url) == before
    ok = httpx.post(url + path, content=body, headers=auth(WRITE), timeout=30)
    assert ok.status_code == (200 if path == "/flush" else 202), ok.text


@pytest.mark.parametrize("path", ["/bundle/manifest", "/bundle/v/1/ttft.ubj", "/model/ttft/download",
                                  "/model/tpot/xgb/json", "/model/export"])
def test_model_downloads_need_the_read_or_write_token(guarded: tuple[str, Any, Path], path: str) -> None:
    url, _, _ = guarded
    assert httpx.get(url + path, timeout=10).status_code == 401
    assert httpx.get(url + path, headers=auth("wrong"), timeout=10).status_code == 403
    assert httpx.get(url + path, headers=auth(READ), timeout=10).status_code == 200
    assert httpx.get(url + path, headers=auth(WRITE), timeout=10).status_code == 200


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/", "/data/status", "/model/download/info",
                                  "/model/ttft/info", "/models/list", "/metrics"])
def test_status_and_metadata_stay_open(guarded: tuple[str, Any, Path], path: str) -> None:
    assert httpx.get(guarded[0] + path, timeout=10).status_code == 200


def test_the_server_process_maps_no_scikit_learn(guarded: tuple[str, Any, Path]) -> None:
    """The ``[dev]`` virtualenv has scikit-learn, which XGBoost would import (2 s, ~90 MiB): the trainer's process
    keeps it out and still fits (its built-in prior is an XGBoost fit at start-up)."""
    url, proc, _ = guarded
    maps = Path(f"/proc/{proc.pid}/maps").read_text()
    assert "/sklearn/" not in maps and "/pandas/" not in maps
    assert "libxgboost" in maps
    assert httpx.get(url + "/bundle/manifest", headers=auth(READ)).json()["version"] >= 1


def test_each_outcome_is_counted(guarded: tuple[str, Any, Path]) -> None:
    url, _, _ = guarded
    httpx.post(f"{url}/flush", timeout=10)
    httpx.post(f"{url}/flush", headers=auth("x"), timeout=10)
    httpx.get(f"{url}/bundle/manifest", headers=auth(READ), timeout=10)
    text = httpx.get(f"{url}/metrics", timeout=10).text
    for endpoint, outcome in [("flush", "missing"), ("flush", "invalid"), ("bundle", "ok")]:
        assert re.search(rf'trainer_auth_total{{endpoint="{endpoint}",outcome="{outcome}"}} [1-9]', text), text


def test_a_rotated_token_file_takes_effect(guarded: tuple[str, Any, Path]) -> None:
    url, _, token_file = guarded
    fresh = "w-rotated-" + "3" * 20
    token_file.write_text(fresh)
    os.utime(token_file, ns=(10**18, 10**18))
    try:
        assert httpx.post(f"{url}/add_training_data_bulk", content=entries(), headers=auth(WRITE),
                          timeout=10).status_code == 403
        assert httpx.post(f"{url}/add_training_data_bulk", content=entries(), headers=auth(fresh),
                          timeout=30).status_code == 202
    finally:
        token_file.write_text(WRITE)
        os.utime(token_file, ns=(2 * 10**18, 2 * 10**18))


def _raw_post(url: str, path: str, headers: dict[str, str], first_body: bytes = b"") -> tuple[socket.socket, bytes]:
    """Send a request head (and maybe the start of the body); return the socket and the response head."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    sock.sendall(head.encode() + b"\r\n" + first_body)
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    return sock, data


@pytest.mark.parametrize(("path", "limit"), [("/add_training_data_bulk", 2 << 20), ("/flush", 1 << 20)])
def test_declared_oversize_body_is_413_before_it_is_sent(guarded: tuple[str, Any, Path], path: str,
                                                         limit: int) -> None:
    url, proc, _ = guarded
    before = peak_rss_kib(proc.pid)
    size = 100 << 20
    sock, head = _raw_post(url, path, {**auth(WRITE), "Content-Type": "application/json",
                                       "Content-Length": str(size)})
    with sock:
        assert head.startswith(b"HTTP/1.1 413"), head
        body = head.split(b"\r\n\r\n", 1)[1]
        while len(body) < int(re.search(rb"content-length: (\d+)", head.lower()).group(1)):  # type: ignore[union-attr]
            body += sock.recv(65536)
        assert f"limit of {limit} bytes" in json.loads(body)["detail"]
        chunk = b"0" * (1 << 20)
        try:  # the client goes on sending: the server discards it, holding none of it
            for _ in range(size // len(chunk)):
                sock.sendall(chunk)
        except OSError:
            pass
    assert peak_rss_kib(proc.pid) - before < LIMIT_MB * 1024


def test_chunked_body_is_cut_off_at_the_limit(guarded: tuple[str, Any, Path]) -> None:
    url, proc, _ = guarded
    before = peak_rss_kib(proc.pid)
    sent = 0

    def stream() -> Iterator[bytes]:
        nonlocal sent
        chunk = b"[" + b"0," * (1 << 19)
        for _ in range(100):
            sent += len(chunk)
            yield chunk

    response = httpx.post(f"{url}/add_training_data_bulk", content=stream(), headers=auth(WRITE), timeout=60)
    assert response.status_code == 413 and f"limit of {2 << 20} bytes" in response.json()["detail"]
    assert peak_rss_kib(proc.pid) - before < LIMIT_MB * 1024


@pytest.mark.parametrize("path", ["/add_training_data_bulk", "/add_training_data_bulk?partial=true", "/flush",
                                  "/predict"])
def test_deep_nesting_is_a_422_on_every_post_endpoint(guarded: tuple[str, Any, Path], path: str) -> None:
    for body in (b"[" * 100_000, b'{"entries": [' + b"[" * 100 + b"]" * 100 + b"]}"):
        response = httpx.post(guarded[0] + path, content=body, headers=auth(WRITE), timeout=10)
        assert response.status_code == 422, response.text
        (error,) = response.json()["detail"]
        assert error["type"] == "json_too_deep" and "32 levels" in error["msg"]


def test_unknown_fields_are_accepted_and_counted(guarded: tuple[str, Any, Path]) -> None:
    url = guarded[0]
    rows = mixed_rows(4)
    rows[1]["prefill_token_in_flight"] = 7
    response = httpx.post(f"{url}/add_training_data_bulk", json={"entries": rows}, headers=auth(WRITE), timeout=10)
    assert response.status_code == 202
    text = httpx.get(f"{url}/metrics", timeout=10).text
    assert 'trainer_unknown_fields_total{field="prefill_token_in_flight"} 1.0' in text
    assert "timestamp" not in re.findall(r'trainer_unknown_fields_total\{field="([^"]+)"', text)


def test_without_a_token_writes_are_open_with_one_warning(tmp_path: Path) -> None:
    with trainer(tmp_path / "data", {"LATENCY_LOG_LEVEL": "WARNING"}) as (url, _):
        assert httpx.post(f"{url}/add_training_data_bulk", content=entries(), timeout=30).status_code == 202
        assert httpx.post(f"{url}/flush", timeout=10).status_code == 200
        assert httpx.get(f"{url}/bundle/manifest", timeout=10).status_code == 200
        log = next(tmp_path.glob("trainer-*.log"))
        lines = wait_for(lambda: [ln for ln in log.read_text().splitlines() if "UNAUTHENTICATED" in ln])
    assert len(lines) == 1 and "127.0.0.1:" in lines[0] and "POST /flush" in lines[0]


def test_strict_fields_reject_unknown_fields_per_row(tmp_path: Path) -> None:
    with trainer(tmp_path / "data", {"LATENCY_STRICT_FIELDS": "true"}) as (url, _):
        rows = mixed_rows(3)
        rows[2]["prefill_token_in_flight"] = 7
        whole = httpx.post(f"{url}/add_training_data_bulk", json={"entries": rows}, timeout=10)
        assert whole.status_code == 422
        assert whole.json()["detail"][0]["loc"] == ["body", "entries", 2, "prefill_token_in_flight"]
        partial = httpx.post(f"{url}/add_training_data_bulk?partial=true", json={"entries": rows}, timeout=10)
        assert partial.status_code == 202 and partial.json()["accepted"] == 2
        assert [r["index"] for r in partial.json()["rejected"]] == [2]
        single = httpx.post(f"{url}/predict", json={**{k: v for k, v in rows[0].items() if not k.startswith("a")},
                                                   "typo": 1}, timeout=10)
        assert single.status_code == 422 and single.json()["detail"][0]["loc"] == ["body", "typo"]


def test_concurrent_oversize_uploads_do_not_add_up(guarded: tuple[str, Any, Path]) -> None:
    """Four clients each declaring 100 MB at once: every one gets its 413, memory stays flat."""
    url, proc, _ = guarded
    before = peak_rss_kib(proc.pid)
    heads: list[bytes] = []

    def one() -> None:
        sock, head = _raw_post(url, "/add_training_data_bulk", {**auth(WRITE), "Content-Length": str(100 << 20)})
        heads.append(head)
        sock.close()

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(heads) == 4 and all(h.startswith(b"HTTP/1.1 413") for h in heads)
    assert peak_rss_kib(proc.pid) - before < LIMIT_MB * 1024
