"""Endpoint discovery with real name resolution: names in /etc/hosts, sim pods on loopback aliases
(127.0.0.2, 127.0.0.3 — all of 127/8 is loopback on Linux) sharing one port, as pods behind a headless
Service share one name. Resolution failures keep the last set; a hung resolver is not started twice."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from demo.prom import metric_value
from router_client.config import PoolConfig, RouterConfig
from router_client.discovery import Discovery, pod_url, resolve
from router_client.live_metrics import RouterMetrics
from router_client.membership import LEAVING, SERVING, Change, Membership
from router_client.router import Decision, RequestInfo, Router
from sim.engine.config import EngineConfig
from sim.pod.config import PodConfig
from sim.pod.launch import run_pods
from tests.hosts_file import HostsFile, hosts_file, shared_port
from tests.waiting import wait_for_async

A2, A3 = "127.0.0.2", "127.0.0.3"
TIME_SCALE = 0.02


@pytest.fixture
def hosts() -> Iterator[HostsFile]:
    with hosts_file() as h:
        yield h


def _discovered(name: str, port: int, refresh_s: float = 3600.0) -> PoolConfig:
    return PoolConfig(name="short", discovery={"dns": f"{name}:{port}", "refresh_s": refresh_s}, max_context=4096)


def _counter(registry: CollectorRegistry, **labels: str) -> float:
    return metric_value(generate_latest(registry).decode(), "router_discovery_refreshes_total", **labels)


def test_resolve_reads_etc_hosts(hosts: HostsFile) -> None:
    name = hosts.unique_name()
    hosts.set({name: [A3, A2, A2]})
    assert asyncio.run(resolve(name, 8000)) == [A2, A3], "sorted, duplicates dropped"
    hosts.set({name: []})
    with pytest.raises(OSError):
        asyncio.run(resolve(name, 8000))
    assert pod_url("fd00::1", 80) == "http://[fd00::1]:80" and pod_url(A2, 80) == "http://127.0.0.2:80"


def test_refresh_follows_the_record_set_and_keeps_the_last_one_on_failure(
        hosts: HostsFile, caplog: pytest.LogCaptureFixture) -> None:
    name = hosts.unique_name()
    pool = _discovered(name, 8000)
    members, registry, changes = Membership([pool]), CollectorRegistry(), []
    discovery = Discovery([pool], members, changes.append, RouterMetrics(registry))
    u2, u3 = pod_url(A2, 8000), pod_url(A3, 8000)

    async def body() -> None:
        hosts.set({name: [A2, A3]})
        await discovery.refresh_all()
        assert members.pool("short").resolved == (u2, u3) and changes == [Change("short", (u2, u3))]
        await discovery.refresh_all()
        assert len(changes) == 1, "same set: nothing to tell"
        hosts.set({name: [A2]})
        await discovery.refresh_all()
        assert changes[-1] == Change("short", (), (u3,)) and members.pods("short") == (u2,)
        hosts.set({})
        with caplog.at_level(logging.INFO, logger="router_client.discovery"):
            await discovery.refresh_all()
            await discovery.refresh_all()
            assert members.pool("short").resolved == (u2,), "a failed resolution keeps the last set"
            status = discovery.status("short")
            assert status is not None and status["last_outcome"] == "error" and status["last_error"]
            hosts.set({name: [A2]})
            await discovery.refresh_all()
        assert discovery.status("short")["last_outcome"] == "ok"  # type: ignore[index]

    asyncio.run(body())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "keeping the last 1 pods" in warnings[0], warnings
    assert any("resolves again" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)
    counts = {o: _counter(registry, pool="short", outcome=o) for o in ("changed", "ok", "error")}
    assert counts == {"changed": 2, "ok": 2, "error": 2}
    assert discovery.status("long") is None


def test_a_hung_resolution_is_awaited_again_not_started_twice_and_empty_answers_keep_the_set() -> None:
    pool = _discovered("vllm-short", 8000, refresh_s=0.05)
    members, registry = Membership([pool]), CollectorRegistry()
    calls: list[str] = []
    answers: list[list[str]] = [[A2]]
    gate = asyncio.Event()

    async def resolver(host: str, port: int) -> list[str]:
        calls.append(host)
        await gate.wait()
        return answers[0]

    discovery = Discovery([pool], members, lambda change: None, RouterMetrics(registry), resolver=resolver)

    async def body() -> None:
        await discovery.refresh_all()
        await discovery.refresh_all()
        assert calls == ["vllm-short"] and members.pods("short") == ()
        gate.set()
        await discovery.refresh_all()
        assert calls == ["vllm-short"] and members.pods("short") == (pod_url(A2, 8000),)
        answers[0] = []
        await discovery.refresh_all()
        assert members.pods("short") == (pod_url(A2, 8000),), "an empty answer keeps the last set"

    asyncio.run(body())
    assert _counter(registry, pool="short", outcome="error") == 2
    assert _counter(registry, pool="short", outcome="empty") == 1


@contextlib.contextmanager
def _sim_pods(addresses: list[str]) -> Iterator[int]:
    port = shared_port(addresses)
    cfg = PodConfig(EngineConfig.from_preset("llama3-8b-a100", max_model_len=4096, seed=1), TIME_SCALE, pool="short")
    with contextlib.ExitStack() as stack:
        for address in addresses:
            stack.enter_context(run_pods([cfg], host=address, ports=[port]))
        yield port


def _info(i: int, prefix: str) -> RequestInfo:
    return RequestInfo(route="/v1/completions", body_bytes=2000, prompt_tokens=500, max_tokens=20,
                       prefix_text=prefix, system_prompt_hash=None, slo_ttft_ms=None, slo_tpot_ms=None,
                       sheddable=False, request_id=f"r{i}")


def _run(cfg: RouterConfig, body: Callable[[Router], Awaitable[None]]) -> None:
    async def main() -> None:
        router = Router(cfg)
        await router.start()
        try:
            await body(router)
        finally:
            await router.aclose()

    asyncio.run(main())


def test_router_follows_the_name_keeps_state_of_pods_that_stay_and_retires_a_leaver_after_its_requests(
        hosts: HostsFile) -> None:
    name = hosts.unique_name()
    prefix = "You are a careful assistant. " * 20
    with _sim_pods([A2, A3]) as port:
        u2, u3 = pod_url(A2, port), pod_url(A3, port)
        hosts.set({name: [A2, A3]})
        cfg = RouterConfig.parse({"pools": [_discovered(name, port).model_dump()], "scraper": {"interval_s": 0.05},
                                  "scheduler": {"seed": 1}})

        async def body(router: Router) -> None:
            assert router.members.pods("short") == (u2, u3), "resolved by start(); candidates before any scrape"
            await wait_for_async(lambda: all(router.members.state(u) == SERVING for u in (u2, u3)),
                                 what="first scrapes")
            open_: dict[str, list[Decision]] = {u2: [], u3: []}
            for i in range(200):
                d = await router.decide(_info(i, prefix))
                assert d.pod_url in open_
                open_[d.pod_url].append(d)
                if all(len(v) >= 2 for v in open_.values()):
                    break
            assert all(open_.values()), {u: len(v) for u, v in open_.items()}
            in_flight = {u: router.in_flight(u) for u in (u2, u3)}
            routed_u2 = next(p["routed"] for p in router.status()["pools"][0]["pods"] if p["url"] == u2)

            hosts.set({name: [A2]})
            await router.discovery.refresh_all()
            assert router.members.pods("short") == (u2,) and router.members.state(u3) == LEAVING
            assert {u: router.in_flight(u) for u in (u2, u3)} == in_flight, "in-flight state kept"
            later = [await router.decide(_info(1000 + i, prefix)) for i in range(20)]
            assert {d.pod_url for d in later} == {u2}
            assert later[0].features["prefix_cache_score"] == 1.0, "the prefix index of the pod that stays is kept"
            status_pods = {p["url"]: p for p in router.status()["pools"][0]["pods"]}
            assert status_pods[u3]["state"] == LEAVING and status_pods[u3]["in_flight"] == in_flight[u3]
            assert status_pods[u2]["routed"] == routed_u2 + 20
            for d in later:
                router.on_complete(d, 50.0, 100.0, 10)

            for d in open_[u3]:  # in-flight requests of the pod that left finish and report normally
                router.on_first_token(d)
                router.on_complete(d, 50.0, 100.0, 10)
            assert router.members.state(u3) is None, "retired once its last request finished"
            assert [p["url"] for p in router.status()["pools"][0]["pods"]] == [u2]
            text = generate_latest(router.metrics_registry).decode()
            assert f'pod="{u3}"' not in text, "per-pod series of the pod that left are gone"
            assert metric_value(text, "router_pool_pods", pool="short", state="serving") == 1
            assert metric_value(text, "router_pool_pods", pool="short", state="leaving") == 0
            assert router.in_flight(u2) == in_flight[u2]
            for d in open_[u2]:
                router.on_complete(d, 50.0, 100.0, 10)
            assert router.in_flight(u2) == 0

        _run(cfg, body)
