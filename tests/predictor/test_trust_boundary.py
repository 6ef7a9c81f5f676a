"""The predictor's trust boundary on real subprocess servers: /reload token, byte and depth limits, unknown
fields, pulling from a token-protected trainer."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.predictor.conftest import build_bundle, random_rows
from tests.procs import peak_rss_kib, predictor, trainer
from tests.trainer.test_trust_boundary import _raw_post

WRITE, READ = "pw-" + "5" * 24, "pr-" + "6" * 24


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    root = tmp_path_factory.mktemp("pred-guarded")
    build_bundle(root / "bundles", 1)
    env = {"LATENCY_WRITE_TOKEN": WRITE, "PREDICT_MAX_BULK_BYTES": str(1 << 20)}
    with predictor(root, ["--bundle-dir", str(root / "bundles")], env) as (url, proc):
        yield url, proc


def test_reload_needs_the_write_token(served: tuple[str, Any]) -> None:
    url = served[0]
    missing = httpx.post(f"{url}/reload", timeout=10)
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    assert httpx.post(f"{url}/reload", headers={"Authorization": "Bearer x"}, timeout=10).status_code == 403
    assert httpx.post(f"{url}/reload", headers={"Authorization": f"Bearer {WRITE}"}, timeout=10).status_code == 200
    rows = {"requests": random_rows(3)}
    assert httpx.post(f"{url}/predict/bulk/strict", json=rows, timeout=10).status_code == 200  # reads stay open
    text = httpx.get(f"{url}/metrics", timeout=10).text
    for outcome in ("missing", "invalid", "ok"):
        assert re.search(rf'predictor_auth_total{{endpoint="reload",outcome="{outcome}"}} 1\.0', text), text


@pytest.mark.parametrize(("path", "limit"), [("/predict/bulk/strict", 1 << 20), ("/predict/bulk", 1 << 20),
                                             ("/predict", 1 << 20)])
def test_oversize_body_is_413_before_it_is_read(served: tuple[str, Any], path: str, limit: int) -> None:
    url, proc = served
    before = peak_rss_kib(proc.pid)
    sock, head = _raw_post(url, path, {"Content-Length": str(100 << 20), "Content-Type": "application/json"})
    with sock:
        assert head.startswith(b"HTTP/1.1 413"), head
        chunk = b" " * (1 << 20)
        try:
            for _ in range(100):
                sock.sendall(chunk)
        except OSError:
            pass
    assert peak_rss_kib(proc.pid) - before < 50 * 1024
    chunked = httpx.post(url + path, content=iter([b'{"requests": [' + b" " * (1 << 20)] * 3), timeout=30)
    assert chunked.status_code == 413 and f"limit of {limit} bytes" in chunked.json()["detail"]


@pytest.mark.parametrize("path", ["/predict", "/predict/bulk", "/predict/bulk/strict", "/reload"])
def test_deep_nesting_is_a_422_never_a_500(served: tuple[str, Any], path: str) -> None:
    headers = {"Authorization": f"Bearer {WRITE}"}
    response = httpx.post(served[0] + path, content=b"[" * 100_000, headers=headers, timeout=10)
    if path == "/reload":  # takes no body
        assert response.status_code == 200
        return
    assert response.status_code == 422 and response.json()["detail"][0]["type"] == "json_too_deep"


def test_unknown_fields_are_counted_by_name(served: tuple[str, Any]) -> None:
    url = served[0]
    rows = random_rows(5)
    rows[0]["prefill_token_in_flight"] = 3
    assert httpx.post(f"{url}/predict/bulk/strict", json={"requests": rows}, timeout=10).status_code == 200
    one = {**random_rows(1)[0], "num_request_wating": 1}
    assert httpx.post(f"{url}/predict", json=one, timeout=10).status_code == 200
    text = httpx.get(f"{url}/metrics", timeout=10).text
    assert 'predictor_unknown_fields_total{field="prefill_token_in_flight"} 1.0' in text
    assert 'predictor_unknown_fields_total{field="num_request_wating"} 1.0' in text


def test_strict_mode_rejects_unknown_fields(tmp_path: Path) -> None:
    build_bundle(tmp_path / "bundles", 1)
    with predictor(tmp_path, ["--bundle-dir", str(tmp_path / "bundles")], {"LATENCY_STRICT_FIELDS": "true"}) \
            as (url, _):
        rows = random_rows(3)
        rows[1]["typo_field"] = 1
        response = httpx.post(f"{url}/predict/bulk/strict", json={"requests": rows}, timeout=10)
        assert response.status_code == 422
        assert response.json()["detail"] == [{"type": "extra_forbidden", "loc": ["body", "requests", 1, "typo_field"],
                                              "msg": "Extra inputs are not permitted", "input": 1}]
        assert httpx.post(f"{url}/predict/bulk/strict", json={"requests": random_rows(3)},
                          timeout=10).status_code == 200


def test_pulls_from_a_token_protected_trainer(tmp_path: Path) -> None:
    env = {"LATENCY_WRITE_TOKEN": "tw-" + "7" * 20, "LATENCY_READ_TOKEN": READ}
    with trainer(tmp_path / "data", env) as (trainer_url, _):
        (tmp_path / "read-token").write_text(READ)
        with predictor(tmp_path, ["--training-url", trainer_url],
                       {"LATENCY_READ_TOKEN_FILE": str(tmp_path / "read-token")}) as (url, _):
            status = httpx.get(f"{url}/status", timeout=10).json()
            assert status["bundle"]["version"] == 1 and status["sync"]["last_error"] is None
        wrong = tmp_path / "wrong"
        wrong.mkdir()
        with predictor(wrong, ["--training-url", trainer_url], {"LATENCY_READ_TOKEN": "nope"},
                       ready_path="/healthz") as (url, _):
            status = httpx.get(f"{url}/status", timeout=10).json()
            assert not status["is_ready"] and "HTTP 403" in status["sync"]["last_error"]
            assert "LATENCY_READ_TOKEN" in status["sync"]["last_error"]


def test_bulk_body_within_limit_predicts(served: tuple[str, Any]) -> None:
    body = json.dumps({"requests": random_rows(200)}).encode()
    assert len(body) < 1 << 20
    assert httpx.post(f"{served[0]}/predict/bulk/strict", content=body, timeout=10).status_code == 200
