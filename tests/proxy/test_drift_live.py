"""Live: one sim pod made 4× slower through its admin endpoint shows up, within 60 s, in the router's per-pod
correction factor and in its drift metrics (the raw model's coverage of that pod collapses; the corrected
prediction follows the pod).

The whole stack runs as subprocesses on loopback (two sim pods, a trainer and a predictor, the proxy) with the
router's default correction and drift settings; the pod is slowed with the simulator's ``POST /admin/scenario``
(asserted to answer 200: a pod without it fails the test).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from demo.prom import metric_value
from demo.stack import PoolSpec, Stack, StackSpec
from tests.waiting import wait_for

SPEC = StackSpec(
    pools=(PoolSpec("short", 2, 8192, max_num_seqs=64),), time_scale=1.0, retrain_interval_s=2.0,
    sync_interval_s=0.5, min_samples_for_retrain=30, trainer_env={"LATENCY_XGB_N_ESTIMATORS": "40"},
    router={"predictor_timeout_ms": 200.0, "reporter": {"flush_interval_s": 0.3}},
)
SLOWDOWN = 4.0
# Why real time and 4×: the relative correction applies about the square root of the slow/fast ratio (each pod's
# factor over the pool's median of two), and the stack's own overheads on a loaded machine do not slow down with
# the pod. At time_scale 0.25 and 3× the factor plateaued at 1.39–1.52 beside two busy loops (a CI run never
# reached 1.5 in 60 s); at time_scale 1 and 4× it plateaus at 2.0–2.1, reached in ~6 s.


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with Stack(SPEC, Path(tmp_path_factory.mktemp("drift-stack")), startup_timeout_s=90) as stack:
        yield stack


class Load:
    """Streamed completions with fresh random prompts (no prefix hits), from ``workers`` threads."""

    def __init__(self, url: str, workers: int = 3) -> None:
        self.url = url
        self.stop = threading.Event()
        self.sent = 0
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(workers)]

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)

    def _run(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        with httpx.Client(timeout=60) as client:
            while not self.stop.is_set():
                body = {"model": "m", "prompt": rng.integers(10, 30_000, int(rng.integers(600, 2000))).tolist(),
                        "max_tokens": 4, "output_tokens": 4, "stream": True}
                resp = client.post(self.url + "/v1/completions", json=body)
                if resp.status_code != 200:
                    self.errors.append(resp.text[:200])
                self.sent += 1


def _pod(status: dict[str, Any], url: str) -> dict[str, Any]:
    pod: dict[str, Any] = next(p for p in status["pools"][0]["pods"] if p["url"] == url)
    return pod


def _warm(client: httpx.Client, stack: Stack) -> dict[str, Any] | None:
    """A trained model is serving and both pods have enough streamed, predicted pairs."""
    bundle = client.get(stack.predictor_urls["short"] + "/status").json().get("bundle") or {}
    status: dict[str, Any] = client.get(stack.router_url + "/status").json()
    pods = status["pools"][0]["pods"]
    enough = all(p["ttft"]["pairs"] >= 40 for p in pods)
    return status if bundle.get("prior") is False and enough else None


def test_slowed_pod_shows_in_correction_and_drift_within_60_s(live: Stack) -> None:
    slow, fast = live.pod_urls["short"]
    with httpx.Client(timeout=30) as client, Load(live.router_url) as load:
        probe = client.post(slow + "/admin/scenario", json={"speed_factor": 1.0})
        assert probe.status_code == 200, f"sim pods must serve POST /admin/scenario: {probe.status_code} {probe.text}"
        wait_for(lambda: _warm(client, live), timeout=120, interval=0.5, what="a trained model and 40 pairs per pod")
        answer = client.post(slow + "/admin/scenario", json={"speed_factor": SLOWDOWN})
        assert answer.status_code == 200, answer.text
        slowed_at = time.monotonic()

        seen: list[str] = []

        def shows_up() -> str | None:
            text = client.get(live.router_url + "/metrics").text
            factor = metric_value(text, "router_pod_correction", pod=slow, target="ttft")
            other = metric_value(text, "router_pod_correction", pod=fast, target="ttft")
            model_cov = metric_value(text, "router_model_coverage", pod=slow, target="ttft")
            seen.append(f"{time.monotonic() - slowed_at:.0f}s {factor:.2f}/{other:.2f} cov {model_cov:.2f}")
            return text if factor >= 1.5 * max(other, 1.0) and model_cov < 0.8 else None

        try:
            text = wait_for(shows_up, timeout=60, interval=0.5, what="the slowdown in router_pod_correction and "
                            "router_model_coverage")
        except AssertionError as err:
            raise AssertionError(f"{err}; slow/fast factor, slow pod's raw coverage: {seen[::8]}") from None
        took = time.monotonic() - slowed_at
        status = client.get(live.router_url + "/status").json()
        client.post(slow + "/admin/scenario", json={"speed_factor": 1.0})
    assert not load.errors, load.errors[:3]
    fast_factor = metric_value(text, "router_pod_correction", pod=fast, target="ttft")
    slow_factor = metric_value(text, "router_pod_correction", pod=slow, target="ttft")
    slowed = _pod(status, slow)["ttft"]
    assert slowed["correction"] >= 1.4 and slowed["model_coverage"] < 0.85, slowed
    print(f"slowdown visible after {took:.1f} s: factor {slow_factor:.2f} (other pod {fast_factor:.2f}), "
          f"raw model coverage {slowed['model_coverage']:.2f}, corrected coverage {slowed['coverage']:.2f}")
