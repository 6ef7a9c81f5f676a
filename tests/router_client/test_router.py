"""The Router facade over real loopback HTTP: fake predictor/trainer/pods at the external boundary."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import generate_latest

from demo.prom import metric_value
from router_client.config import RouterConfig
from router_client.router import Decision, RequestInfo, Router

PROMPT = "You are a terse assistant. " * 20


def config(pods: list[str], predictors: list[str], trainer: str | None = None, **extra: Any) -> RouterConfig:
    data: dict[str, Any] = {
        "pools": [{"name": "short", "pods": pods, "max_context": 4096, "trainer_url": trainer,
                   "predictor_urls": predictors}],
        "predictor_timeout_ms": 2000, "scraper": {"interval_s": 0.05},
        "reporter": {"flush_interval_s": 0.1}, "scheduler": {"seed": 1, "exploration": 0.0, "min_share": 0.0},
    }
    data.update(extra)
    return RouterConfig.model_validate(data)


@contextlib.contextmanager
def pods(kit: Any, n: int) -> Iterator[tuple[list[Any], list[str]]]:
    fakes = [kit.FakePod() for _ in range(n)]
    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(kit.serve(f.app())) for f in fakes]
        yield fakes, urls


def info(i: int = 0, **kw: Any) -> RequestInfo:
    base: dict[str, Any] = {"route": "/v1/completions", "body_bytes": 2000, "prompt_tokens": 500,
                            "max_tokens": 50, "prefix_text": f"{i:08d}" * 40, "request_id": f"r{i}"}
    base.update(kw)
    return RequestInfo(**base)


async def _decide_all(router: Router, infos: list[RequestInfo]) -> list[Decision]:
    return list(await asyncio.gather(*(router.decide(i) for i in infos)))


def run(cfg: RouterConfig, body: Any) -> Any:
    async def main() -> Any:
        router = Router(cfg)
        await router.start()
        try:
            return await body(router)
        finally:
            await router.aclose()

    return asyncio.run(main())


def test_decides_with_predictions_and_scraped_features(kit: Any, fake_predictor: tuple[Any, str]) -> None:
    fp, purl = fake_predictor
    with pods(kit, 3) as (fakes, urls):
        fakes[0].waiting, fakes[1].waiting, fakes[2].waiting = 5, 0, 5

        async def body(router: Router) -> Decision:
            await asyncio.sleep(0.3)  # a few scrapes
            return await router.decide(info())

        d = run(config(urls, [purl]), body)
    assert d.pod_url == urls[1] and not d.shed and not d.fallback
    assert d.features["num_request_waiting"] == 0 and d.features["num_tokens_generated"] == 1
    assert d.predicted_ttft_ms == pytest.approx(10 + 500 / 10)
    assert d.reason.startswith(("predicted", "prefix")) and fp.calls


def test_in_flight_tracking_spreads_load(kit: Any, fake_predictor: tuple[Any, str]) -> None:
    _, purl = fake_predictor
    with pods(kit, 4) as (_, urls):
        async def body(router: Router) -> tuple[list[Decision], list[int]]:
            ds = [await router.decide(info(i)) for i in range(8)]
            running = [router.in_flight(u) for u in urls]
            for d in ds:
                router.on_first_token(d)
                router.on_complete(d, 50.0, 150.0, 11)
            return ds, running

        ds, running = run(config(urls, [purl], scheduler={"seed": 1, "picker": {"name": "max"},
                                                          "exploration": 0.0}), body)
    assert running == [2, 2, 2, 2]  # predicted TTFT grows with router-side running requests
    assert all(d.features["num_request_running"] == i // 4 for i, d in enumerate(ds))


FALLBACK_CASES = [
    # (predictor mode, decision budget ms, counted reason); generous budgets where time is not the point
    ("500", 2000, "status"),
    ("503", 2000, "status"),
    ("slow", 50, "timeout"),
    ("short", 2000, "decode"),
    ("garbage", 2000, "decode"),
]


@pytest.mark.parametrize(("mode", "budget_ms", "reason"), FALLBACK_CASES)
def test_fallback_when_predictor_misbehaves(kit: Any, mode: str, budget_ms: float, reason: str) -> None:
    fp = kit.FakePredictor(mode=mode, delay_s=2.0)
    with kit.serve(fp.app()) as purl, pods(kit, 2) as (fakes, urls):
        fakes[0].waiting = 9
        cfg = config(urls, [purl], predictor_timeout_ms=budget_ms, predictor_http_timeout_ms=3000)

        async def body(router: Router) -> tuple[list[Decision], dict]:
            await asyncio.sleep(0.2)
            ds = [await router.decide(info(i)) for i in range(3)]
            return ds, router.fallback_counts()

        ds, counts = run(cfg, body)
    assert all(d.pod_url in urls and d.fallback and d.predicted_ttft_ms is None for d in ds)
    assert all("fallback=" + reason in d.reason for d in ds), [d.reason for d in ds]
    assert counts == {("short", reason): 3.0}
    assert [d.pod_url for d in ds].count(urls[1]) >= 2  # composite prefers the short queue


def test_fallback_when_predictor_down(kit: Any) -> None:
    dead = f"http://127.0.0.1:{kit.free_port()}"
    with pods(kit, 2) as (_, urls):
        ds, counts = run(config(urls, [dead]), lambda r: _with_counts(r, [info(i) for i in range(3)]))
    assert all(d.fallback and d.pod_url in urls for d in ds)
    assert counts == {("short", "error"): 3.0}


async def _with_counts(router: Router, infos: list[RequestInfo]) -> tuple[list[Decision], dict]:
    ds = [await router.decide(i) for i in infos]
    return ds, router.fallback_counts()


def test_second_predictor_url_used_when_first_is_down(kit: Any, fake_predictor: tuple[Any, str]) -> None:
    fp, purl = fake_predictor
    dead = f"http://127.0.0.1:{kit.free_port()}"
    with pods(kit, 2) as (_, urls):
        ds, counts = run(config(urls, [dead, purl]), lambda r: _with_counts(r, [info(i) for i in range(6)]))
    assert counts.get(("short", "error"), 0) <= 1  # at most the first call hits the dead URL
    assert sum(not d.fallback for d in ds) >= 5 and len(fp.calls) >= 5


def test_concurrent_decisions_are_coalesced(kit: Any, fake_predictor: tuple[Any, str]) -> None:
    fp, purl = fake_predictor
    with pods(kit, 4) as (_, urls):
        cfg = config(urls, [purl], coalesce_window_ms=20)
        ds = run(cfg, lambda r: _decide_all(r, [info(i) for i in range(16)]))
    assert not any(d.fallback for d in ds)
    assert sum(fp.calls) == 16 * 4 and len(fp.calls) < 16


def test_shed_with_impossible_slo(kit: Any, fake_predictor: tuple[Any, str]) -> None:
    _, purl = fake_predictor
    with pods(kit, 2) as (_, urls):
        async def body(router: Router) -> list[Decision]:
            return [await router.decide(info(1, slo_ttft_ms=1.0, sheddable=True)),
                    await router.decide(info(2, slo_ttft_ms=1.0, sheddable=False)),
                    await router.decide(info(3, slo_tpot_ms=0.1, sheddable=True))]

        shed, kept, shed_tpot = run(config(urls, [purl]), body)
    assert shed.shed and shed.pod_url is None and shed.reason.startswith("shed:slo_ttft ")
    assert shed.retry_after_s == 1.0 and shed.predicted_ttft_ms == pytest.approx(60.0)
    assert not kept.shed and kept.pod_url in urls
    assert shed_tpot.shed and shed_tpot.reason.startswith("shed:slo_tpot ")


def test_admission_can_judge_by_p99(kit: Any, fake_predictor: tuple[Any, str]) -> None:
    """p90 = 60 ms meets a 100 ms SLO, p99 = 120 ms does not: shed only with slo.admission_quantile = 0.99, and
    routing still uses the p90 answers."""
    _, purl = fake_predictor
    with pods(kit, 2) as (_, urls):
        async def body(router: Router) -> Decision:
            return await router.decide(info(1, slo_ttft_ms=100.0, sheddable=True))

        by_p90 = run(config(urls, [purl]), body)
        by_p99 = run(config(urls, [purl], slo={"admission_quantile": 0.99}), body)
    assert not by_p90.shed and by_p90.predicted_ttft_ms == pytest.approx(60.0)
    assert by_p99.shed and by_p99.reason.startswith("shed:slo_ttft ")
    assert "best_predicted_ttft_ms=120.0" in by_p99.reason


def test_samples_reach_trainer_and_live_error_is_exported(kit: Any, fake_predictor: tuple[Any, str],
                                                          fake_trainer: tuple[Any, str]) -> None:
    _, purl = fake_predictor
    ft, turl = fake_trainer
    with pods(kit, 2) as (_, urls):
        async def body(router: Router) -> bytes:
            for i in range(10):
                d = await router.decide(info(i, slo_ttft_ms=55.0))
                router.on_first_token(d)
                router.on_complete(d, ttft_ms=40.0 + 4 * i, e2e_ms=40.0 + 4 * i + 9 * 12.0, output_tokens=10,
                                   prompt_tokens=520)
            deadline = time.monotonic() + 5
            while len(ft.entries) < 10 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            return generate_latest(router.metrics_registry)

        text = run(config(urls, [purl], trainer=turl), body).decode()
    assert len(ft.entries) == 10
    row = ft.entries[0]
    assert row["actual_ttft_ms"] == 40.0 and row["actual_tpot_ms"] == pytest.approx(12.0)
    assert row["num_tokens_generated"] == 0 and row["input_token_length"] == 520
    # actual TTFT 40, 44, ..., 76 against a predicted 60 (nothing in flight) and an SLO of 55 ms
    assert metric_value(text, "router_prediction_coverage", pool="short", pod="all", target="ttft") == \
        pytest.approx(0.6, abs=0.01)
    assert metric_value(text, "router_prediction_pairs_total", pool="short", pod="all", target="ttft") == 10
    assert 'router_slo_violations_total{pool="short",slo="ttft"} 6.0' in text


def test_coalescing_respects_the_row_cap(kit: Any, fake_predictor: tuple[Any, str]) -> None:
    fp, purl = fake_predictor
    with pods(kit, 4) as (_, urls):
        cfg = config(urls, [purl], coalesce_window_ms=20, max_coalesced_rows=8)
        ds = run(cfg, lambda r: _decide_all(r, [info(i) for i in range(16)]))
    assert not any(d.fallback for d in ds)
    assert max(fp.calls) <= 8 and sum(fp.calls) == 64


def test_failed_scrapes_are_counted_and_decisions_continue(kit: Any, fake_predictor: tuple[Any, str]) -> None:
    _, purl = fake_predictor
    with pods(kit, 2) as (fakes, urls):
        fakes[0].status = 500

        async def body(router: Router) -> tuple[Decision, bytes]:
            await asyncio.sleep(0.3)
            return await router.decide(info()), generate_latest(router.metrics_registry)

        d, text = run(config(urls, [purl]), body)
    assert d.pod_url in urls and not d.fallback
    metrics = text.decode()
    assert f'router_scrape_errors_total{{pod="{urls[0]}",reason="status"}}' in metrics
    stale = [line for line in metrics.splitlines() if line.startswith("router_endpoint_staleness_seconds")]
    ages = {line.split('pod="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1]) for line in stale}
    assert ages[urls[0]] > 1e6 and ages[urls[1]] < 1.0  # never scraped vs fresh


def test_repeated_client_request_ids_keep_in_flight_exact(kit: Any) -> None:
    with pods(kit, 1) as (_, urls):
        async def body(router: Router) -> list[int]:
            a = await router.decide(info(1))
            b = await router.decide(info(2, request_id="r1"))  # same client id, both in flight
            counts = [router.in_flight(urls[0])]
            router.on_complete(a, 10.0, 20.0, 2)
            counts.append(router.in_flight(urls[0]))
            router.on_complete(b, 10.0, 20.0, 2)
            router.on_complete(b, 10.0, 20.0, 2)  # reported twice: no effect
            counts.append(router.in_flight(urls[0]))
            return counts

        assert run(config(urls, []), body) == [2, 1, 0]


def test_pods_whose_scrapes_keep_failing_get_no_traffic(kit: Any, fake_predictor: tuple[Any, str]) -> None:
    _, purl = fake_predictor
    with pods(kit, 3) as (fakes, urls):
        fakes[0].status = 500  # this pod's /metrics never answers: the router must treat it as down

        async def body(router: Router) -> list[Decision]:
            await asyncio.sleep(0.3)
            return [await router.decide(info(i)) for i in range(30)]

        ds = run(config(urls, [purl], scraper={"interval_s": 0.05, "stale_after_s": 0.2}), body)
    chosen = {d.pod_url for d in ds}
    assert urls[0] not in chosen and chosen <= set(urls[1:])


def test_when_every_pod_is_stale_all_stay_candidates(kit: Any, fake_predictor: tuple[Any, str]) -> None:
    _, purl = fake_predictor
    with pods(kit, 2) as (fakes, urls):
        for fake in fakes:
            fake.status = 500

        async def body(router: Router) -> list[Decision]:
            await asyncio.sleep(0.3)
            return [await router.decide(info(i)) for i in range(20)]

        ds = run(config(urls, [purl], scraper={"interval_s": 0.05, "stale_after_s": 0.2}), body)
    assert all(d.pod_url in urls for d in ds) and not any(d.shed for d in ds)


def test_slow_pod_is_corrected_and_shows_in_metrics_and_status(kit: Any, fake_predictor: tuple[Any, str]) -> None:
    """Pod 0 answers 3× slower than predicted: after min_samples streamed pairs its predictions are scaled
    by ≈ 3 (ratio taken against the raw prediction, recorded in the Decision), the other pod's are not;
    the factor and the raw model's low coverage show in /metrics and status()."""
    _, purl = fake_predictor
    with pods(kit, 2) as (_, urls):
        slow = urls[0]

        async def body(router: Router) -> tuple[list[Decision], bytes, dict[str, Any]]:
            seen = []
            for i in range(120):
                d = await router.decide(info(i))
                seen.append(d)
                router.on_first_token(d)
                assert d.raw_predicted_ttft_ms is not None and d.raw_predicted_tpot_ms is not None
                factor = 3.0 if d.pod_url == slow else 0.8
                ttft = d.raw_predicted_ttft_ms * factor
                router.on_complete(d, ttft, ttft + 9 * d.raw_predicted_tpot_ms * factor, 10)
            return seen, generate_latest(router.metrics_registry), router.status()

        cfg = config(urls, [purl], scheduler={"seed": 1, "exploration": 0.0, "min_share": 0.4},
                     correction={"min_samples": 10, "relative": False, "half_life_s": 3600.0})
        # a factor decays toward 1 with the wall time since its pod's last pair; a long half-life keeps that
        # decay negligible however slowly a loaded machine runs the 120 decisions
        ds, text, status = run(cfg, body)
    late = [d for d in ds[-30:] if d.pod_url == slow]
    assert late, "anti-starvation keeps sending the slow pod some traffic"
    for d in late:
        assert d.predicted_ttft_ms == pytest.approx(3.0 * d.raw_predicted_ttft_ms, rel=0.02)  # type: ignore[operator]
        assert d.predicted_tpot_ms == pytest.approx(3.0 * d.raw_predicted_tpot_ms, rel=0.02)  # type: ignore[operator]
    page = text.decode()
    assert metric_value(page, "router_pod_correction", pod=slow, target="ttft") == pytest.approx(3.0, rel=0.02)
    assert metric_value(page, "router_pod_correction", pod=urls[1], target="tpot") == pytest.approx(0.8, rel=0.02)
    assert metric_value(page, "router_model_coverage", pod=slow, target="ttft") < 0.5
    assert metric_value(page, "router_drift_alarm", pod=slow, target="ttft") == 0.0
    pod = next(p for p in status["pools"][0]["pods"] if p["url"] == slow)
    assert pod["ttft"]["correction"] == pytest.approx(3.0, rel=0.02) and pod["ttft"]["pairs"] == len(
        [d for d in ds if d.pod_url == slow])
    assert pod["ttft"]["measured_mean_ms"] > pod["ttft"]["predicted_mean_ms"] * 0.5
    assert 0 < pod["share"] < 0.5 and pod["routed"] == pod["ttft"]["pairs"]
    assert status["pools"][0]["ttft"]["pairs"] == 120 and status["correction"]["min_samples"] == 10


def _corrected_run(kit: Any, purl: str, factors: tuple[float, float]) -> tuple[list[str], list[Decision]]:
    """120 streamed requests over two pods whose actual latency is ``factors[i]`` × the raw prediction."""
    with pods(kit, 2) as (_, urls):
        async def body(router: Router) -> list[Decision]:
            seen = []
            for i in range(120):
                d = await router.decide(info(i))
                seen.append(d)
                router.on_first_token(d)
                f = factors[urls.index(d.pod_url)]
                ttft = d.raw_predicted_ttft_ms * f  # type: ignore[operator]
                router.on_complete(d, ttft, ttft + 9 * d.raw_predicted_tpot_ms * f, 10)  # type: ignore[operator]
            return seen

        cfg = config(urls, [purl], scheduler={"seed": 1, "exploration": 0.0, "min_share": 0.4},
                     correction={"min_samples": 10})
        return urls, run(cfg, body)


def test_relative_correction_corrects_what_sets_a_pod_apart(kit: Any, fake_predictor: tuple[Any, str]) -> None:
    """Relative (the default): pod 0 at 3x and pod 1 at 0.8x the raw prediction get their own factor divided
    by the pool median (geometric mean of two): sqrt(3 / 0.8) and sqrt(0.8 / 3)."""
    _, purl = fake_predictor
    urls, ds = _corrected_run(kit, purl, (3.0, 0.8))
    spread = (3.0 / 0.8) ** 0.5
    for d in ds[-30:]:
        want = spread if d.pod_url == urls[0] else 1 / spread
        assert d.predicted_ttft_ms == pytest.approx(want * d.raw_predicted_ttft_ms, rel=0.02)  # type: ignore[operator]


def test_relative_correction_leaves_a_shift_the_whole_pool_shares(kit: Any, fake_predictor: tuple[Any, str]) -> None:
    """Both pods 2x slower than predicted: the pool's model owns that shift, no pod is corrected."""
    _, purl = fake_predictor
    _, ds = _corrected_run(kit, purl, (2.0, 2.0))
    assert all(d.predicted_ttft_ms == d.raw_predicted_ttft_ms for d in ds)


def test_non_streamed_completion_does_not_feed_the_correction(kit: Any, fake_predictor: tuple[Any, str]) -> None:
    """Without a first token TTFT is the whole response time: the sample is reported, but not compared."""
    _, purl = fake_predictor
    with pods(kit, 1) as (_, urls):
        async def body(router: Router) -> dict[str, Any]:
            for i in range(30):
                d = await router.decide(info(i))
                router.on_complete(d, 5000.0, 5000.0, 50)
            return router.status()

        status = run(config(urls, [purl], correction={"min_samples": 5}), body)
    pod = status["pools"][0]["pods"][0]
    assert pod["ttft"] == {"correction": 1.0, "correction_samples": 0, "pairs": 0} and pod["routed"] == 30
