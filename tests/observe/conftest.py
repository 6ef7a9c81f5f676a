"""One running stack for the tests of what people look at (status pages, demo report, Grafana dashboard).

``observed`` — sim pods (short: 2, long: 1), a trainer + predictor per pool and the router proxy, all real
subprocesses on loopback (``demo.stack``), driven with streamed requests until the short pool's trainer has
retrained at least twice and the router has predictions to compare, then left idle (nothing changes while
the tests read it). ``chromium`` — the browser's path, or a skip naming why there is none.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # demo/ is a top-level folder, not an installed package
    sys.path.insert(0, str(REPO))

from demo.browser import find_chromium  # noqa: E402
from demo.load import SHED_PROBE_HEADERS  # noqa: E402
from demo.stack import PoolSpec, Stack, StackSpec  # noqa: E402

SPEC = StackSpec(
    pools=(PoolSpec("short", 2, 4096, max_num_seqs=128), PoolSpec("long", 1, 32768, max_num_seqs=32)),
    time_scale=0.05, retrain_interval_s=1.0, sync_interval_s=0.5, min_samples_for_retrain=20,
    trainer_env={"LATENCY_XGB_N_ESTIMATORS": "30"},
    router={"predictor_timeout_ms": 300.0, "reporter": {"flush_interval_s": 0.3}},
)
DEADLINE_S = 150.0


def _send(client: httpx.Client, url: str, i: int, long: bool = False, headers: dict[str, str] | None = None) -> int:
    body = {"model": "m", "prompt": [i % 50] * (200 + 53 * (i % 30)), "stream": True,
            "max_tokens": 900 if long else 4 + i % 12, "output_tokens": 600 if long else 4 + i % 12}
    with client.stream("POST", url + "/v1/completions", json=body, headers=headers) as resp:
        for _ in resp.iter_lines():
            pass
        return resp.status_code


def _ui(client: httpx.Client, url: str) -> dict[str, Any]:
    return dict(client.get(url + "/ui/data").json())


def _ready(client: httpx.Client, stack: Stack) -> bool:
    trainer = _ui(client, stack.trainer_urls["short"])
    router = _ui(client, stack.router_url)
    retrains = [r for r in trainer["models"]["ttft"]["retrains"] if r["decision"] == "published"]
    return len(trainer["models"]["ttft"]["retrains"]) >= 2 and bool(retrains) and router["recent"]["short"]["n"] >= 20


def _quiet(client: httpx.Client, stack: Stack) -> None:
    """Wait until nothing changes any more: every reported row stored and fitted, no cycle pending."""
    deadline, last, same = time.monotonic() + 60.0, None, 0
    while time.monotonic() < deadline:
        doc = _ui(client, stack.trainer_urls["short"])
        state = (doc["durable"]["rows"], [len(m["retrains"]) for m in doc["models"].values()])
        same = same + 1 if state == last else 0
        if same >= 4:  # four polls over ≥ 2 retrain intervals without a change
            return
        last = state
        time.sleep(0.6)
    raise AssertionError("the stack did not settle after the load stopped")


def drive(stack: Stack) -> None:
    deadline = time.monotonic() + DEADLINE_S
    with httpx.Client(timeout=30) as client:
        i = 0
        assert _send(client, stack.router_url, 0, headers=SHED_PROBE_HEADERS) == 429
        while not _ready(client, stack):
            assert time.monotonic() < deadline, "the short pool's trainer did not retrain twice in time"
            for _ in range(10):
                assert _send(client, stack.router_url, i, long=(i % 10 == 9)) == 200
                i += 1
        _quiet(client, stack)


@pytest.fixture(scope="session")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir: Path = tmp_path_factory.mktemp("observed")
    with Stack(SPEC, workdir, startup_timeout_s=90) as stack:
        drive(stack)
        yield stack


@pytest.fixture(scope="session")
def chromium() -> str:
    path = find_chromium()
    if path is None:
        pytest.skip("chromium is not installed and `make install` could not install it (Debian package "
                    "`chromium`: needs root and apt-get; see deploy/install_chromium.py)")
    return path
