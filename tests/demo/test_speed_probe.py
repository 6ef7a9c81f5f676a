"""``demo.speed_probe``: how much slower this machine runs an engine than the machine its profile was measured on.

Real HTTP pods (``sim.pod``) stand in for engines: one pod's own cold prefills are the "profile", a pod running the
same engine at twice the time scale is a machine twice as slow."""

from __future__ import annotations

import dataclasses
import statistics

import httpx
import pytest

from demo.prior import DEFAULT_PROFILE
from demo.speed_probe import PROBE_TOKENS, ProbeError, profile_ttft_ms, slowdown, ttft_ms
from sim.engine import EngineConfig
from sim.engine.measured import load_profile
from sim.engine.measured_fit import PrefillPoint
from sim.pod import PodConfig, run_pods


def _ids(n: int, start: int) -> list[int]:
    return [1000 + (start + i) % 7000 for i in range(n)]


def test_the_probe_finds_a_machine_twice_as_slow_as_its_profile() -> None:
    cfg = EngineConfig.from_preset("llama3-8b-a100", max_model_len=4096)
    with run_pods([PodConfig(cfg, time_scale=4.0), PodConfig(cfg, time_scale=8.0)]) as pods:
        fast, slow = pods.urls
        with httpx.Client(timeout=30.0) as client:
            ttft_ms(client, fast, _ids(16, 0), "tiny")
            own = {n: statistics.median(ttft_ms(client, fast, _ids(n, 97 * k + n), "tiny") for k in range(3))
                   for n in PROBE_TOKENS}
        profile = dataclasses.replace(load_profile(DEFAULT_PROFILE),
                                      prefill=tuple(PrefillPoint(n, 0, (ms,)) for n, ms in own.items()))
        same, twice = slowdown(profile, fast, 8192), slowdown(profile, slow, 8192)
    assert 0.75 < same < 1.35, (same, own)
    assert 1.6 < twice < 2.6, (twice, own)


def test_a_profile_without_the_probed_size_is_a_clear_error() -> None:
    profile = load_profile(DEFAULT_PROFILE)
    assert profile_ttft_ms(profile, 512) > 0
    with pytest.raises(ProbeError, match="no cold prefill point of 777 tokens"):
        profile_ttft_ms(profile, 777)
