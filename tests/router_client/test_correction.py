"""Per-pod correction (router_client/correction.py): quantile, bounds, decay, recovery, feedback-free."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from router_client.config import CorrectionConfig
from router_client.correction import PodCorrection

H = 30.0


def corr(**kw: float) -> PodCorrection:
    values = {"half_life_s": H, "min_samples": 20, "max_samples": 256, **kw}
    return PodCorrection(CorrectionConfig.model_validate(values), quantile=0.9)


def feed(c: PodCorrection, ratios: np.ndarray | list[float], start: float = 0.0, step: float = 0.01,
         pod: str = "a", target: str = "ttft", predicted: float = 100.0) -> float:
    """Observe one pair per ratio, ``step`` s apart from ``start``; return the time of the last pair."""
    t = start - step
    for r in ratios:
        t += step
        c.observe(pod, target, predicted, predicted * float(r), t)
    return t


def test_factor_is_one_until_min_samples() -> None:
    c = corr()
    t = feed(c, [2.0] * 19)
    assert c.factor("a", "ttft", t) == 1.0
    t = feed(c, [2.0], start=t + 0.01)
    assert c.factor("a", "ttft", t) == pytest.approx(2.0, rel=1e-3)
    assert c.factor("a", "tpot", t) == 1.0 and c.factor("b", "ttft", t) == 1.0, "per pod and per target"


@pytest.mark.parametrize(("ratio", "expected"), [(10.0, 4.0), (100.0, 4.0), (0.1, 0.5), (0.01, 0.5), (1.5, 1.5)])
def test_factor_is_bounded(ratio: float, expected: float) -> None:
    c = corr()
    t = feed(c, [ratio] * 40)
    assert c.factor("a", "ttft", t) == pytest.approx(expected, rel=1e-3)


def test_custom_bounds() -> None:
    c = corr(min_factor=0.8, max_factor=1.25)
    t = feed(c, [3.0] * 40)
    assert c.factor("a", "ttft", t) == pytest.approx(1.25)


def _calibrated(n: int, sigma: float = 0.3) -> np.ndarray:
    """n ratios at evenly spaced quantiles of a lognormal whose 0.9-quantile is exactly 1."""
    z = np.array([NormalDist().inv_cdf((i + 0.5) / n) for i in range(n)])
    return np.exp(sigma * (z - NormalDist().inv_cdf(0.9)))


def test_healthy_pod_keeps_factor_one() -> None:
    """A calibrated model for this pod: no evidence against it, factor exactly 1; without the evidence gate
    the fitted quantile is ≈ 1 anyway."""
    gated, fitted = corr(), corr(evidence_z=0.0)
    ratios = np.random.default_rng(0).permutation(_calibrated(256))
    t = feed(gated, ratios)
    feed(fitted, ratios)
    assert gated.factor("a", "ttft", t) == 1.0
    assert fitted.factor("a", "ttft", t) == pytest.approx(1.0, abs=0.02)


def test_gate_leaves_most_healthy_pods_alone() -> None:
    """Random draws from a calibrated pod: at evidence_z = 2 about 95 % keep factor 1 (≥ 90 % of 200)."""
    rng = np.random.default_rng(11)
    untouched = 0
    for _ in range(200):
        c = corr()
        t = feed(c, np.exp(0.3 * (rng.standard_normal(256) - NormalDist().inv_cdf(0.9))))
        untouched += c.factor("a", "ttft", t) == 1.0
    assert untouched >= 180, untouched


def test_a_small_but_clear_slowdown_passes_the_gate() -> None:
    """1.3× slower: raw coverage ≈ 0.65 on ~250 pairs, far outside 0.9 ± 2 standard errors."""
    c = corr()
    t = feed(c, 1.3 * np.random.default_rng(3).permutation(_calibrated(256)))
    assert c.factor("a", "ttft", t) == pytest.approx(1.3, rel=0.02)


def test_slow_pod_gets_its_slowdown() -> None:
    rng = np.random.default_rng(1)
    c = corr()
    t = feed(c, rng.permutation(_calibrated(200)))
    t = feed(c, 2.0 * rng.permutation(_calibrated(200)), start=t + 0.01)
    assert c.factor("a", "ttft", t) == pytest.approx(2.0, rel=0.05)


@pytest.mark.parametrize(("age_half_lives", "expected"), [(0, 2.0), (1, 2 ** 0.5), (2, 2 ** 0.25), (20, 1.0)])
def test_decays_to_one_without_evidence(age_half_lives: float, expected: float) -> None:
    c = corr()
    t = feed(c, [2.0] * 40, step=0.0)
    assert c.factor("a", "ttft", t + age_half_lives * H) == pytest.approx(expected, rel=1e-3)
    assert c.factor("a", "ttft", t - 5.0) == pytest.approx(2.0), "a query before the last pair never amplifies"


def test_recovers_when_the_pod_is_fast_again() -> None:
    """Old slow pairs lose weight with age; once fresh ratios ≈ 1 dominate, the factor returns to ≈ 1."""
    c = corr()
    t = feed(c, [2.0] * 200, step=0.1)
    assert c.factor("a", "ttft", t) == pytest.approx(2.0, rel=1e-3)
    t = feed(c, [1.0] * 60, start=t + 0.1, step=0.1)  # 6 s: the slow pairs still hold > 10 % of the weight
    assert c.factor("a", "ttft", t) == pytest.approx(2.0, rel=1e-3)
    t = feed(c, [1.0] * 1200, start=t + 0.1, step=0.1)  # 2 minutes of fresh evidence
    assert c.factor("a", "ttft", t) == pytest.approx(1.0, rel=1e-3)


def test_old_pairs_weigh_less_than_new_ones() -> None:
    c = corr(max_samples=400)
    t = feed(c, [3.0] * 200, step=0.0)
    t = feed(c, [1.0] * 100, start=t + 5 * H, step=0.0)  # fewer, but 32× heavier each
    assert c.factor("a", "ttft", t) == pytest.approx(1.0)


def test_apply_multiplies_each_pod_and_target() -> None:
    c = corr()
    feed(c, [2.0] * 30, pod="slow", target="ttft", step=0.0)
    feed(c, [3.0] * 30, pod="slow", target="tpot", step=0.0)
    out = c.apply(["fast", "slow"], [(100.0, 10.0), (100.0, 10.0)], 0.0)
    assert out == [(100.0, 10.0), pytest.approx((200.0, 30.0))]


def test_disabled_changes_nothing() -> None:
    c = corr(enabled=False)  # type: ignore[arg-type]
    t = feed(c, [3.0] * 40)
    assert c.factor("a", "ttft", t) == 1.0 and list(c.keys()) == []
    assert c.apply(["a"], [(5.0, 6.0)], t) == [(5.0, 6.0)]


@pytest.mark.parametrize(("predicted", "actual"), [(100.0, 0.0), (100.0, -1.0), (100.0, math.inf),
                                                   (None, 50.0), (100.0, None), (math.nan, 50.0)])
def test_unusable_pairs_are_ignored(predicted: float | None, actual: float | None) -> None:
    c = corr(min_samples=1)
    c.observe("a", "ttft", predicted, actual, 0.0)
    assert c.state("a", "ttft", 0.0).samples == 0


def test_ratio_is_taken_against_the_raw_prediction() -> None:
    """The loop as the router runs it: decide with raw × factor, learn actual / raw. A pod 2× slower than its
    raw prediction settles at factor 2 and stays there (no feedback through the corrected value)."""
    c = corr()
    raw, t = 100.0, 0.0
    factors = []
    for _ in range(400):
        corrected = c.apply(["a"], [(raw, 10.0)], t)[0][0]
        c.observe("a", "ttft", raw, 2.0 * raw, t)
        factors.append(corrected / raw)
        t += 0.1
    assert factors[:19] == [1.0] * 19
    assert factors[-1] == pytest.approx(2.0, rel=0.01) and min(factors[20:]) == pytest.approx(2.0, rel=0.01)


def test_config_rejects_inconsistent_values() -> None:
    with pytest.raises(ValueError, match="max_samples"):
        CorrectionConfig(min_samples=50, max_samples=10)
    with pytest.raises(ValueError, match="min_factor"):
        CorrectionConfig(min_factor=1.5)
