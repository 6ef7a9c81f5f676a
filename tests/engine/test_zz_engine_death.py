"""An engine killed mid-stream (runs last: the shared stack keeps one engine afterwards).

The client's stream ends with the proxy's error event and ``[DONE]`` (never a hang), the router stops
sending to the dead engine once its scrapes fail, and the survivor serves everything after that.
"""

from __future__ import annotations

import threading

import httpx
import orjson
import pytest

from demo.stack import Stack
from tests.engine.engine_client import POOL, stream, tokens
from tests.waiting import wait_for

pytestmark = pytest.mark.engine


def _child_of(stack: Stack, url: str) -> str:
    index = stack.pod_urls[POOL].index(url)
    return f"engine-{POOL}-{index}"


def test_engine_killed_mid_stream_ends_the_stream_and_traffic_moves_on(engine_stack: Stack) -> None:
    body = {"model": "tiny", "prompt": tokens(32, 7), "max_tokens": 3000, "ignore_eos": True, "stream": True}
    events: list[bytes] = []
    with httpx.Client(timeout=120) as client:
        with client.stream("POST", engine_stack.router_url + "/v1/completions", json=body,
                           headers={"x-request-id": "dies"}) as resp:
            victim = resp.headers["x-routed-pod"]
            lines = resp.iter_lines()
            for line in lines:
                if line.startswith("data: "):
                    events.append(line[6:].encode())
                if len(events) >= 3:
                    break
            killer = threading.Thread(target=engine_stack.procs.kill, args=(_child_of(engine_stack, victim),))
            killer.start()
            events.extend(line[6:].encode() for line in lines if line.startswith("data: "))
            killer.join(30)
        assert events[-1] == b"[DONE]"
        error = orjson.loads(events[-2])["error"]
        assert error["type"] == "upstream_error", error
        survivor = next(u for u in engine_stack.pod_urls[POOL] if u != victim)

        def routed_to_survivor() -> bool:
            got = stream(client, engine_stack.router_url, tokens(16, 8), 2, "after-death")
            return got.status == 200 and got.headers["x-routed-pod"] == survivor

        wait_for(routed_to_survivor, timeout=60, interval=0.2, what="the router routes around the dead engine")
        results = [stream(client, engine_stack.router_url, tokens(16, 9 + i), 2, f"after-{i}") for i in range(8)]
    assert all(r.status == 200 and r.headers["x-routed-pod"] == survivor for r in results), \
        [(r.status, r.headers.get("x-routed-pod")) for r in results]
