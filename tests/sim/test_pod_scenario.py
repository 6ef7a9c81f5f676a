"""Scenarios on live pods over real HTTP: ``/admin/scenario``, scheduled events, ``sim.pod --scenario``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sim.engine import EngineConfig
from sim.pod import PodConfig, RunningPods, run_pods
from sim.scenario import PodChange, TimedEvent
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
QUIET = EngineConfig.from_preset("llama3-8b-a100", max_model_len=4096, noise_std=0.0)


def _ttft_sum(url: str) -> float:
    text = httpx.get(url + "/metrics", timeout=5).text
    line = next(x for x in text.splitlines() if x.startswith("vllm:time_to_first_token_seconds_sum"))
    return float(line.rsplit(" ", 1)[1])


def _simulated_ttft(url: str, tag: str) -> float:
    """Simulated TTFT of one request on an idle pod (exact: noise is off)."""
    before = _ttft_sum(url)
    body = {"prompt": f"{tag} " * 800, "prompt_token_count": 1000, "max_tokens": 1}
    assert httpx.post(url + "/v1/completions", json=body, timeout=20).status_code == 200
    return _ttft_sum(url) - before


@pytest.fixture
def pods() -> Iterator[RunningPods]:
    scheduled = (TimedEvent(at_s=30.0, index=0, pod="pod-1", change=PodChange(speed_factor=3.0)),)
    configs = [PodConfig(QUIET, 0.05, pod_id="pod-0"),
               PodConfig(QUIET, 0.02, pod_id="pod-1", scenario=scheduled)]
    with run_pods(configs) as running:
        yield running


def test_admin_speed_change_doubles_ttft(pods: RunningPods) -> None:
    url = pods.urls[0]
    normal = _simulated_ttft(url, "alpha")
    r = httpx.post(url + "/admin/scenario", json={"speed_factor": 2.0}, timeout=5)
    assert r.status_code == 200, r.text
    state = r.json()
    assert state["pod"] == "pod-0" and state["speed_factor"] == 2.0
    assert state["events"][-1]["speed_factor"] == 2.0 and state["events"][-1]["source"] == "admin"
    slow = _simulated_ttft(url, "bravo")
    assert slow == pytest.approx(2 * normal, rel=1e-3)
    assert httpx.get(url + "/admin/scenario", timeout=5).json()["speed_factor"] == 2.0


def test_admin_rejects_bad_changes_naming_the_key(pods: RunningPods) -> None:
    url = pods.urls[0] + "/admin/scenario"
    cases = [({"speed": 2}, "unknown key 'speed'"), ({"speed_factor": -1}, "'speed_factor' must be > 0"),
             ({"at_s": 5, "fail": True}, "'at_s' is not accepted"), ({"pod": "pod-7", "fail": True}, "'pod'"),
             ({"kv_blocks": 3}, "'kv_blocks' leaves 3 KV blocks"), ({}, "no change given")]
    for body, message in cases:
        r = httpx.post(url, json=body, timeout=5)
        assert r.status_code == 400, body
        assert message in r.json()["error"]["message"], (body, r.text)
    assert httpx.post(url, content=b"{nope", timeout=5).status_code == 400
    assert httpx.get(url, timeout=5).json()["speed_factor"] == 1.0


def test_scheduled_event_applies_at_its_virtual_time(pods: RunningPods) -> None:
    url = pods.urls[1] + "/admin/scenario"
    first = httpx.get(url, timeout=5).json()
    assert first["pending"] == [{"at_s": 30.0, "speed_factor": 3.0}] or first["speed_factor"] == 3.0
    wait_for(lambda: httpx.get(url, timeout=5).json()["speed_factor"] == 3.0, what="the scheduled speed change")
    state = httpx.get(url, timeout=5).json()
    assert state["pending"] == [] and state["events"][0]["source"] == "scenario event 0"
    assert state["events"][0]["at_s"] >= 30.0 and state["virtual_time_s"] >= 30.0


def test_fail_aborts_streams_and_refuses_until_restore(pods: RunningPods) -> None:
    url = pods.urls[0]
    lines: list[str] = []
    with httpx.stream("POST", url + "/v1/completions",
                      json={"prompt": "x", "output_tokens": 4000, "stream": True}, timeout=20) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                lines.append(line[6:])
            if len(lines) == 3:
                assert httpx.post(url + "/admin/scenario", json={"fail": True}, timeout=5).json()["failed"]
    assert lines[-1] == "[DONE]" and "error" in json.loads(lines[-2])
    tokens = [json.loads(x) for x in lines[:-2]]
    assert 3 <= len(tokens) < 4000 and all(t["choices"][0]["finish_reason"] is None for t in tokens)
    assert httpx.get(url + "/health", timeout=5).status_code == 503
    refused = httpx.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=5)
    assert refused.status_code == 503 and "down" in refused.json()["error"]["message"]
    assert httpx.post(url + "/admin/scenario", json={"restore": True}, timeout=5).json()["failed"] is False
    assert httpx.get(url + "/health", timeout=5).status_code == 200
    ok = httpx.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=10)
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 2
    metrics = httpx.get(url + "/metrics", timeout=5).text
    assert 'vllm:request_success_total{finished_reason="abort",model_name=' in metrics


def _pod_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "sim.pod", "--port", "0", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=30)


def test_pod_cli_scenario_errors(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('[[events]]\nat_fraction = 0.5\npod = "pod-1"\nspeed_factor = 2.0\n')
    res = _pod_cli("--count", "2", "--scenario", str(path))
    assert res.returncode == 2 and "'at_fraction' needs a known span" in res.stderr
    res = _pod_cli("--count", "1", "--scenario", str(path), "--scenario-span-s", "60")
    assert res.returncode == 2 and "'pod' = 'pod-1' does not exist" in res.stderr
