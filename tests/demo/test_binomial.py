"""``demo.binomial``: the two-sided 99 % acceptance interval of a calibrated quantile's covered count, checked
against scipy's binomial distribution (the demo itself uses only the standard library)."""

from __future__ import annotations

import pytest
from scipy.stats import binom

from demo.binomial import acceptance_interval, coverage_interval


def test_p90_on_200_pairs_is_168_to_190_covered() -> None:
    assert acceptance_interval(200, 0.9) == (168, 190)
    assert coverage_interval(200, 0.9) == (0.84, 0.95)  # exact; the normal approximation says 0.845-0.955
    assert binom.cdf(167, 200, 0.9) <= 0.005 < binom.cdf(168, 200, 0.9)  # P(K < 168) ≤ 0.005 < P(K < 169)
    assert binom.sf(190, 200, 0.9) <= 0.005 < binom.sf(189, 200, 0.9)  # P(K > 190) ≤ 0.005 < P(K > 189)


@pytest.mark.parametrize("q", [0.1, 0.5, 0.9, 0.95, 0.99])
def test_each_tail_holds_at_most_half_a_percent_and_no_bound_could_be_tighter(q: float) -> None:
    for n in [*range(1, 320), 1000, 2500]:
        lo, hi = acceptance_interval(n, q)
        assert binom.cdf(lo - 1, n, q) <= 0.005 and (lo == n or binom.cdf(lo, n, q) > 0.005), (n, lo)
        assert binom.sf(hi, n, q) <= 0.005 and (hi == 0 or binom.sf(hi - 1, n, q) > 0.005), (n, hi)
        assert binom.cdf(hi, n, q) - binom.cdf(lo - 1, n, q) >= 0.99  # a calibrated quantile passes ≥ 99 %


def test_small_counts_and_other_levels() -> None:
    assert acceptance_interval(1, 0.9) == (0, 1) and acceptance_interval(30, 0.9) == (22, 30)
    assert acceptance_interval(50, 0.9) == (39, 50)  # 50 of 50 is still what a calibrated p90 does 0.5 % of the time
    lo, hi = acceptance_interval(200, 0.9, 0.9)
    assert (lo, hi) == tuple(int(x) for x in binom.interval(0.9, 200, 0.9)) and 168 < lo and hi < 190


@pytest.mark.parametrize(("n", "q", "level"), [(0, 0.9, 0.99), (10, 0.0, 0.99), (10, 1.0, 0.99), (10, 0.9, 1.0)])
def test_nonsense_is_refused(n: int, q: float, level: float) -> None:
    with pytest.raises(ValueError, match="need n >= 1"):
        acceptance_interval(n, q, level)
