"""Discovery through the real proxy: two sim pods behind one name (``/etc/hosts``, loopback aliases 127.0.0.2 and
127.0.0.3 on one port, as pods behind a headless Service), a steady stream of streamed requests while the record
set changes. Both pods get traffic; a pod that leaves the record set gets no request later than
``refresh_s`` + 2 s after it left; a pod that joins gets traffic, one that never answers a scrape (127.0.0.4,
nothing listening) gets none; a name that stops resolving keeps the last set; no request fails throughout."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from router_client.config import RouterConfig
from router_client.discovery import pod_url
from sim.engine.config import EngineConfig
from sim.pod.config import PodConfig
from sim.pod.launch import run_pods
from tests.hosts_file import HostsFile, hosts_file, shared_port
from tests.proxy.conftest import RunningProxy
from tests.waiting import wait_for

REFRESH_S = 1.0
PATIENCE: dict[str, float] = {"timeout": 60.0, "interval": 0.25}
TARGET_S = REFRESH_S + 2.0
A2, A3, A4 = "127.0.0.2", "127.0.0.3", "127.0.0.4"
TIME_SCALE = 0.5
"""Slow enough that requests are in flight (≈0.1-0.3 s each) when the record set changes."""
CLIENTS = 4


@dataclass
class Load:
    """``CLIENTS`` threads sending streamed completions back to back until stopped."""

    url: str
    stop: threading.Event = field(default_factory=threading.Event)
    results: list[tuple[float, int, str, bool]] = field(default_factory=list)
    """(sent at, status, routed pod, whole stream received)."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, worker: int) -> None:
        with httpx.Client(timeout=60) as client:
            i = 0
            while not self.stop.is_set():
                i += 1
                body = {"model": "m", "prompt": f"client {worker} request {i} " * 8, "max_tokens": 16,
                        "stream": True}
                sent = time.time()
                try:
                    r = client.post(self.url + "/v1/completions", json=body)
                    ok = r.status_code == 200 and r.text.rstrip().endswith("data: [DONE]") and '"error"' not in r.text
                    result = (sent, r.status_code, r.headers.get("x-routed-pod", ""), ok)
                except httpx.HTTPError as exc:
                    result = (sent, 0, repr(exc), False)
                with self.lock:
                    self.results.append(result)


@contextlib.contextmanager
def running_load(url: str) -> Iterator[Load]:
    load = Load(url)
    threads = [threading.Thread(target=load.run, args=(w,), daemon=True) for w in range(CLIENTS)]
    for t in threads:
        t.start()
    try:
        yield load
    finally:
        load.stop.set()
        for t in threads:
            t.join(60)


def dispatches(proxy_url: str) -> list[dict[str, Any]]:
    """Every finished request the proxy logged (pod, wall-clock dispatch time, error)."""
    out: list[dict[str, Any]] = []
    with httpx.Client(timeout=30) as client:
        while True:
            page = client.get(proxy_url + "/ui/requests", params={"after": out[-1]["seq"] if out else 0,
                                                                  "limit": 10000}).json()["requests"]
            if not page:
                return out
            out += page


def pod_status(proxy_url: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    pool = httpx.get(proxy_url + "/status", timeout=30).json()["pools"][0]
    return pool["discovery"], {p["url"]: p for p in pool["pods"]}


@pytest.fixture
def hosts() -> Iterator[HostsFile]:
    with hosts_file() as h:
        yield h


def test_proxy_follows_the_record_set_without_failing_a_request(
        hosts: HostsFile, serve_proxy: Callable[[RouterConfig], RunningProxy]) -> None:
    name = hosts.unique_name()
    port = shared_port([A2, A3, A4])
    u2, u3, u4 = (pod_url(a, port) for a in (A2, A3, A4))
    engine = EngineConfig.from_preset("llama3-8b-a100", max_model_len=4096, seed=1)
    with contextlib.ExitStack() as stack:
        for address in (A2, A3):
            stack.enter_context(run_pods([PodConfig(engine, TIME_SCALE, pool="short")], host=address, ports=[port]))
        hosts.set({name: [A2, A3]})
        proxy = serve_proxy(RouterConfig.parse({"pools": [
            {"name": "short", "discovery": {"dns": f"{name}:{port}", "refresh_s": REFRESH_S}, "max_context": 4096}]}))

        def routed_since(pod: str, since: float) -> int:
            return sum(1 for r in dispatches(proxy.url) if r["pod"] == pod and r["dispatched_at"] >= since)

        with running_load(proxy.url) as load:
            wait_for(lambda: routed_since(u2, 0) >= 5 and routed_since(u3, 0) >= 5, what="both pods serve", **PATIENCE)

            removed_at = time.time()
            hosts.set({name: [A2]})
            wait_for(lambda: routed_since(u2, removed_at + TARGET_S) >= 20, what="traffic after the deadline",
                     **PATIENCE)
            wait_for(lambda: u3 not in pod_status(proxy.url)[1], what="the pod that left is retired", **PATIENCE)

            joined_at = time.time()
            hosts.set({name: [A2, A3, A4]})
            wait_for(lambda: routed_since(u3, joined_at) >= 5, what="the pod that came back serves again", **PATIENCE)
            _, pods = pod_status(proxy.url)
            assert pods[u4]["state"] == "joining" and pods[u3]["state"] == "serving"
            page = httpx.get(proxy.url + "/ui", params={"refresh": 0}, timeout=30).text
            assert f"pods discovered from <code>{name}:{port}</code>" in page and '<td class="l">joining</td>' in page

            failed_at = time.time()
            hosts.set({})
            wait_for(lambda: pod_status(proxy.url)[0]["last_outcome"] == "error", what="resolution fails", **PATIENCE)
            wait_for(lambda: routed_since(u2, failed_at + TARGET_S) >= 5 and routed_since(u3, failed_at + TARGET_S)
                     >= 5, what="traffic to the last known pods", **PATIENCE)
            assert set(pod_status(proxy.url)[1]) == {u2, u3, u4}, "the last known set is kept"

        records = dispatches(proxy.url)
    failures = [r for r in load.results if not r[3]]
    assert not failures, f"{len(failures)} of {len(load.results)} requests failed: {failures[:5]}"
    assert not [r for r in records if r["error"]], "the proxy logged failed requests"
    assert {r["pod"] for r in records} == {u2, u3}, "a pod that never answered a scrape got no traffic"
    last = max(r["dispatched_at"] for r in records if r["pod"] == u3 and r["dispatched_at"] < joined_at)
    print(f"\nremoved pod got its last request {last - removed_at:.2f} s after it left the record set "
          f"(refresh_s = {REFRESH_S:g}); requests failed during the changes: 0 of {len(load.results)}")
    assert last - removed_at <= TARGET_S
