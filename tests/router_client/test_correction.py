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


def test_a_decision_reuses_the_evidence_until_a_refit_or_a_new_pool() -> None:
    """What ``apply`` keeps between decisions (fitted pods, evidence) gives exactly what a fresh correction fed
    the same pairs computes — after refits, between them, and once the pool has lost a pod."""
    pools = {"pool": tuple(f"p{i}" for i in range(6))}
    pairs: list[tuple[str, str, float, float, float]] = []
    rng = np.random.default_rng(3)

    def make() -> PodCorrection:
        return PodCorrection(CorrectionConfig(half_life_s=H, min_samples=5), 0.9,
                             lambda pod: pools["pool"] if pod in pools["pool"] else (pod,))

    kept, t = make(), 0.0
    for step in range(600):
        t += 0.05
        if step == 300:
            pools["pool"] = pools["pool"][:-1]
        pod = pools["pool"][step % len(pools["pool"])]
        for target in ("ttft", "tpot"):
            actual = 100.0 * (2.5 if pod == "p1" else 1.0) * float(rng.uniform(0.5, 1.2))
            pairs.append((pod, target, 100.0, actual, t))
            kept.observe(pod, target, 100.0, actual, t)
        if step % 7 == 0:
            fresh = make()
            for pair in pairs:
                fresh.observe(*pair)
            predictions = [(100.0, 10.0, 150.0, 15.0)] * len(pools["pool"])
            assert kept.apply(pools["pool"], predictions, t + 0.01) == fresh.apply(pools["pool"], predictions, t + 0.01)
    assert kept.factor("p1", "ttft", t) > 1.5, "the slow pod is corrected"


def _reference_logs(c: PodCorrection, peers: tuple[str, ...], target: str, now: float) -> dict[str, float]:
    """The applied log factors as the correction first computed them, every decision from the fits: each fitted
    pod's own log factor decayed to ``now``, the two-sample evidence test against the rest of the pool, minus the
    pool's median."""
    fitted = {p: r for p in peers if (r := c._residuals.get((p, target))) is not None and math.isfinite(r.updated_at)}
    out = dict.fromkeys(peers, 0.0)
    own = {p: r.log_factor if now <= r.updated_at else r.log_factor * math.exp2((r.updated_at - now) / H)
           for p, r in fitted.items()}
    z, q = c.config.evidence_z, c.quantile
    if len(peers) == 1 and fitted:
        res = fitted[peers[0]]
        if abs(res.covered - q) > z * math.sqrt(q * (1.0 - q) / res.n_eff):
            out[peers[0]] = own[peers[0]]
        return out
    if len(fitted) < 2:
        return out
    total_n = sum(r.n_eff for r in fitted.values())
    total_covered = sum(r.covered * r.n_eff for r in fitted.values())
    ordered = sorted([*own.values(), *([0.0] * (len(peers) - len(fitted)))])
    mid = len(ordered) // 2
    pool_log = ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])
    for pod, res in fitted.items():
        rest_n = total_n - res.n_eff
        rest_covered = (total_covered - res.covered * res.n_eff) / rest_n
        p = min(max((res.covered * res.n_eff + rest_covered * rest_n) / total_n, 0.01), 0.99)
        if abs(res.covered - rest_covered) > z * math.sqrt(p * (1 - p) * (1 / res.n_eff + 1 / rest_n)):
            out[pod] = own[pod] - pool_log
    return out


@pytest.mark.parametrize("relative", [True, False])
def test_apply_matches_the_factors_computed_afresh_each_decision(relative: bool) -> None:
    """What ``apply`` keeps per pool between refits (which pods are fitted, which show evidence, their log factors
    as of the latest fit, decayed once per decision) gives the factors computed from the fits at every decision —
    two pools, a pod leaving one, decisions before the latest fit, long after it, and admission predictions."""
    pools = {"a": tuple(f"a{i}" for i in range(6)), "b": ("b0", "b1", "b2")}
    c = PodCorrection(CorrectionConfig(half_life_s=H, min_samples=5, relative=relative), 0.9,
                      lambda pod: next((p for p in pools.values() if pod in p), (pod,)))
    rng = np.random.default_rng(5)
    slow = {"a1": 2.5, "b2": 1.8, "a4": 0.6}
    t, checked = 0.0, 0
    for step in range(900):
        t += 0.05
        if step == 450:
            pools["a"] = pools["a"][:-1]
        pod = [p for pool in pools.values() for p in pool][step % 8]
        for target in ("ttft", "tpot"):
            c.observe(pod, target, 100.0, 100.0 * slow.get(pod, 1.0) * float(rng.uniform(0.5, 1.2)), t)
        if step % 5:
            continue
        pods = [*pools["a"], *pools["b"]]
        predictions = [(100.0, 10.0, None if i % 3 == 0 else 150.0, 15.0) for i in range(len(pods))]
        for now in (t - 0.07, t, t + 0.01, t + 3 * H):
            got = c.apply(pods, predictions, now)
            for pod, p, g in zip(pods, predictions, got, strict=True):
                peers = c._peers_of(pod)
                ttft, tpot = (math.exp(_reference_logs(c, tuple(peers), tg, now)[pod]) for tg in ("ttft", "tpot"))
                want = tuple(None if v is None else v * (tpot if j % 2 else ttft) for j, v in enumerate(p))
                assert [v is None for v in g] == [v is None for v in want]
                assert [v for v in g if v is not None] == pytest.approx([v for v in want if v is not None],
                                                                        rel=1e-12), (pod, now)
                checked += ttft != 1.0
    assert checked > 100, "some pods were corrected"
    for pool in pools.values():
        assert c.apply(list(pool), [(1.0, 1.0)] * len(pool), t) == c.apply(list(pool)[::-1], [(1.0, 1.0)] * len(pool),
                                                                           t)[::-1]
