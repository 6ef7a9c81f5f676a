"""The one running stack the suite shares (fixtures ``stack`` and ``observed`` in ``tests/conftest.py``).

Sim pods (short: 2, long: 1), a trainer + predictor per pool and the router proxy, all real subprocesses on
loopback (``demo.stack``), started once per session (per xdist worker: every test that uses it carries the
``stack`` marker and the ``xdist_group`` "stack", so one worker runs them all, in file order).

``drive`` sends streamed requests until the short pool's trainer has retrained at least twice and the router has
predictions to compare, then waits until nothing changes any more (every reported row stored and fitted), so the
tests of what people look at read a stack that stands still. A test that changes the stack puts it back (e.g. a
stopped predictor is restarted); one that counts asserts on what it added (the others' traffic is already there).

Kept on processes of their own, because what they test is a start-up or a speed this stack does not have: the demo
test (``python -m demo``'s own command line), the compose smoke test (docker-compose.yml's command lines), the live
drift test (sim pods at time scale 0.25: at this stack's 0.05 a 3x slower pod did not show within 60 s beside the
loopback overhead) and the engine tests (real vLLM).
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from demo.load import SHED_PROBE_HEADERS
from demo.stack import PoolSpec, Stack, StackSpec
from tests.waiting import wait_for

SPEC = StackSpec(
    pools=(PoolSpec("short", 2, 4096, max_num_seqs=128), PoolSpec("long", 1, 32768, max_num_seqs=32)),
    time_scale=0.05, retrain_interval_s=1.0, sync_interval_s=0.5, min_samples_for_retrain=20,
    trainer_env={"LATENCY_XGB_N_ESTIMATORS": "30"},
    router={"predictor_timeout_ms": 300.0, "reporter": {"flush_interval_s": 0.3}},
)
STARTUP_S = 90.0
DRIVE_S = 150.0


def send(client: httpx.Client, url: str, i: int, long: bool = False, headers: dict[str, str] | None = None) -> int:
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


class _Settled:
    """True once four polls in a row (over ≥ 2 retrain intervals) saw the same durable rows and retrain counts."""

    def __init__(self, client: httpx.Client, stack: Stack) -> None:
        self.client, self.stack = client, stack
        self.last: Any = None
        self.same = 0

    def __call__(self) -> bool:
        doc = _ui(self.client, self.stack.trainer_urls["short"])
        state = (doc["durable"]["rows"], [len(m["retrains"]) for m in doc["models"].values()])
        self.same = self.same + 1 if state == self.last else 0
        self.last = state
        return self.same >= 4


def settle(client: httpx.Client, stack: Stack) -> None:
    wait_for(_Settled(client, stack), timeout=60, interval=0.6, what="the stack settles after the load stopped")


def drive(stack: Stack) -> None:
    deadline = time.monotonic() + DRIVE_S
    with httpx.Client(timeout=30) as client:
        i = 0
        assert send(client, stack.router_url, 0, headers=SHED_PROBE_HEADERS) == 429
        while not _ready(client, stack):
            assert time.monotonic() < deadline, "the short pool's trainer did not retrain twice in time"
            for _ in range(10):
                assert send(client, stack.router_url, i, long=(i % 10 == 9)) == 200
                i += 1
        settle(client, stack)
