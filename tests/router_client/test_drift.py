"""Drift detection (router_client/drift.py): coverage, pinball, pool aggregate, alarm enter/leave with one
log line each."""

from __future__ import annotations

import logging

import pytest

from router_client.config import DriftConfig
from router_client.drift import POOL_WIDE, DriftMonitor, pinball

LOGGER = "router_client.drift"


def monitor(**kw: float) -> DriftMonitor:
    values = {"half_life_s": 60.0, "min_pairs": 10, "alarm_after_s": 30.0, "clear_after_s": 20.0, **kw}
    return DriftMonitor(DriftConfig.model_validate(values), quantile=0.9)


def feed(m: DriftMonitor, covered_share: float, seconds: float, start: float, rate: float = 10.0,
         pod: str = "p1", raw_factor: float = 1.0) -> float:
    """``rate`` pairs/s for ``seconds``: predicted 100 ms; the first ``covered_share`` of every ten pairs
    come in at 90 ms (covered), the rest at 150 ms. ``raw_factor`` scales the raw model's prediction."""
    n = int(seconds * rate)
    t = start
    for i in range(n):
        t = start + i / rate
        actual = 90.0 if (i % 10) < round(covered_share * 10) else 150.0
        m.observe("short", pod, "ttft", 100.0, 100.0 * raw_factor, actual, t)
    return t


@pytest.mark.parametrize(("predicted", "actual", "loss"), [(100.0, 150.0, 45.0), (100.0, 50.0, 5.0),
                                                           (100.0, 100.0, 0.0)])
def test_pinball(predicted: float, actual: float, loss: float) -> None:
    assert pinball(predicted, actual, 0.9) == pytest.approx(loss)


def test_coverage_pinball_means_per_pod_and_pool() -> None:
    m = monitor()
    for actual in (90.0, 90.0, 90.0, 150.0):
        m.observe("short", "p1", "ttft", 100.0, 50.0, actual, 5.0)
    m.observe("short", "p2", "ttft", 100.0, 100.0, 200.0, 5.0)
    p1 = m.state("short", "p1", "ttft")
    assert p1 is not None and p1.pairs == 4
    assert p1.coverage == pytest.approx(0.75) and p1.model_coverage == 0.0, "raw 50 ms covers nothing"
    assert p1.pinball_ms == pytest.approx((3 * 1.0 + 45.0) / 4)
    assert p1.model_pinball_ms == pytest.approx((3 * 36.0 + 90.0) / 4)
    assert p1.predicted_ms == 100.0 and p1.actual_ms == pytest.approx(105.0)
    pool = m.state("short", POOL_WIDE, "ttft")
    assert pool is not None and pool.pairs == 5 and pool.coverage == pytest.approx(0.6)
    assert m.state("short", "p1", "tpot") is None


def test_time_weighting_forgets_old_pairs() -> None:
    m = monitor(half_life_s=10.0)
    m.observe("short", "p1", "ttft", 100.0, None, 150.0, 0.0)  # uncovered, then ...
    m.observe("short", "p1", "ttft", 100.0, None, 50.0, 100.0)  # ... covered, ten half-lives later
    state = m.state("short", "p1", "ttft")
    assert state is not None and state.coverage == pytest.approx(1.0, abs=1e-3)


def _records(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == level]


def test_alarm_enters_once_and_leaves_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    m = monitor(half_life_s=5.0)
    t = feed(m, 0.9, 60.0, 0.0)
    assert not m.state("short", "p1", "ttft").alarm  # type: ignore[union-attr]
    t = feed(m, 0.3, 25.0, t + 0.1)  # out of band, but not yet for alarm_after_s
    assert not m.state("short", "p1", "ttft").alarm  # type: ignore[union-attr]
    t = feed(m, 0.3, 60.0, t + 0.1)
    state = m.state("short", "p1", "ttft")
    assert state is not None and state.alarm and state.outside_since is not None
    warnings = _records(caplog, logging.WARNING)
    assert len(warnings) == 2, warnings  # the pod and its pool, each once despite 600 more pairs
    assert "pool=short pod=p1 target=ttft coverage" in warnings[0] and "outside [0.80, 0.97]" in warnings[0]
    assert "pod=all" in warnings[1]
    t = feed(m, 0.9, 15.0, t + 0.1)  # back in band, shorter than clear_after_s
    assert m.state("short", "p1", "ttft").alarm  # type: ignore[union-attr]
    feed(m, 0.9, 40.0, t + 0.1)
    assert not m.state("short", "p1", "ttft").alarm  # type: ignore[union-attr]
    cleared = _records(caplog, logging.INFO)
    assert len(cleared) == 2 and "drift alarm cleared: pool=short pod=p1 target=ttft" in cleared[0], cleared
    assert len(_records(caplog, logging.WARNING)) == 2


def test_short_excursion_does_not_alarm(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    m = monitor(half_life_s=2.0)
    t = feed(m, 0.9, 30.0, 0.0)
    t = feed(m, 0.0, 10.0, t + 0.1)
    feed(m, 0.9, 60.0, t + 0.1)
    assert not m.state("short", "p1", "ttft").alarm  # type: ignore[union-attr]
    assert _records(caplog, logging.WARNING) == []


def test_too_high_coverage_also_alarms() -> None:
    """Predictions far above the actuals waste capacity (everything looks slow): coverage 1.0 > 0.97."""
    m = monitor(half_life_s=5.0)
    feed(m, 1.0, 90.0, 0.0)
    assert m.state("short", "p1", "ttft").alarm  # type: ignore[union-attr]


def test_no_alarm_below_min_pairs() -> None:
    m = monitor(min_pairs=50)
    feed(m, 0.0, 100.0, 0.0, rate=0.1)  # 10 pairs over 100 s, all uncovered
    state = m.state("short", "p1", "ttft")
    assert state is not None and state.coverage == 0.0 and not state.alarm


def test_corrected_coverage_drives_the_alarm_and_raw_shows_the_pod() -> None:
    """A slow pod the correction compensates: acted-on coverage in band (no alarm), raw model coverage low."""
    m = monitor(half_life_s=5.0)
    feed(m, 0.9, 120.0, 0.0, raw_factor=0.5)
    state = m.state("short", "p1", "ttft")
    assert state is not None and not state.alarm
    assert state.coverage == pytest.approx(0.9, abs=0.05) and state.model_coverage == 0.0


def test_config_band_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="coverage_low"):
        DriftConfig(coverage_low=0.95, coverage_high=0.9)
