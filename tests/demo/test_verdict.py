"""``demo.verdict``: each pool and target judged by the two-sided 99 % binomial interval for its pairs and by the
10 s windows after the first trained bundle; the one line names the pool, the target and why it missed."""

from __future__ import annotations

import pytest

from demo.truth import Joined, accuracy
from demo.verdict import MIN_PAIRS, judge, verdict
from tests.demo.joined import dense, run


@pytest.mark.parametrize(("covered", "met", "phrase"), [
    (0.90, True, "Predictions MET"),
    (0.84, True, "TTFT short 84.0 % of 200 (interval 84.0–95.0 %)"),  # 168 of 200: the lowest count accepted
    (0.835, False, "TTFT short: too low (below 84.0 %)"),
    (0.95, True, "TPOT short 95.0 % of 200 (interval 84.0–95.0 %)"),  # 190 of 200: the highest count accepted
    (0.955, False, "TTFT short: too loose (above 95.0 %): predictions well above the latency measured"),
])
def test_200_pairs_at_p90_are_judged_by_168_to_190_covered(covered: float, met: bool, phrase: str) -> None:
    result = verdict(accuracy(run(200, covered)), 0.9)
    assert result["met"] is met and phrase in result["line"], result["line"]
    assert "\n" not in result["line"]


@pytest.mark.parametrize(("joined", "phrase"), [
    (run(60, 0.2, phase="prior") + run(200, 0.92, start=60),
     "TTFT short: too low (below 85.0 %): the untrained prior bundle served the first 60 requests (coverage 20 %)"),
    (run(200, 0.7, raw_covered=0.9), "the per-pod correction lowered it: the raw model covered 90 %"),
    (run(100, 0.5) + run(100, 0.95, start=100), "the models were still learning: first half 50 %, second half 95 %"),
    (run(200, 0.6), "latency in the second half ran above the predictions"),
    (run(200, 1.0, phase="prior"), "too loose (above 95.0 %): the untrained prior bundle served every request"),
])
def test_a_miss_says_why(joined: list[Joined], phrase: str) -> None:
    result = verdict(accuracy(joined), 0.9)
    assert result["met"] is False and result["line"].startswith("Predictions did NOT meet"), result["line"]
    assert phrase in result["line"], result["line"]


def test_the_line_names_the_pool_and_target_that_missed_and_lists_the_ones_that_met() -> None:
    result = verdict(accuracy(run(300, 0.9) + run(250, 0.99, pool="long", start=1000)), 0.9)
    assert result["met"] is False
    assert result["missed_by"] == ["TTFT long 99.2 % of 250 (interval 84.8–94.4 %)",
                                   "TPOT long 99.2 % of 250 (interval 84.8–94.4 %)"]
    assert [m.split(" ")[:2] for m in result["met_by"]] == [["TTFT", "short"], ["TPOT", "short"]]
    assert "TTFT long: too loose (above 94.4 %)" in result["line"] and "TTFT short:" not in result["line"]


def test_pairs_below_the_minimum_are_reported_not_judged() -> None:
    few = verdict(accuracy(run(MIN_PAIRS - 1, 0.0)), 0.9)
    assert few["met"] is False and few["missed_by"] == [] and few["met_by"] == []
    assert few["line"].startswith("No predictions to judge"), few["line"]
    assert "too few pairs to judge (< 30) TTFT short (29 pairs), TPOT short (29 pairs)" in few["line"]
    assert few["judged"]["short"]["ttft"]["judged"] is False and few["judged"]["short"]["ttft"]["met"] is None
    enough = verdict(accuracy(run(MIN_PAIRS, 0.7)), 0.9)  # 21 of 30: below 22, the lowest count accepted
    assert enough["missed_by"] == ["TTFT short 70.0 % of 30 (interval 73.3–100.0 %)",
                                   "TPOT short 70.0 % of 30 (interval 73.3–100.0 %)"]
    mixed = verdict(accuracy(run(200, 0.9) + run(12, 1.0, pool="long", start=500)), 0.9)
    assert mixed["met"] is True and "too few pairs to judge (< 30) TTFT long (12 pairs)" in mixed["line"]


def test_a_dip_after_the_first_trained_bundle_fails_even_when_the_run_is_inside_its_interval() -> None:
    joined = run(40, 1.0, phase="prior", start=-40) + dense([0.95, 0.95, 0.5, 0.95, 0.95, 0.95, 1.0])
    result = verdict(accuracy(joined), 0.9)
    j = result["judged"]["short"]["ttft"]
    assert list(j["misses"]) == ["dip"] and j["interval_counts"][0] <= j["covered"] <= j["interval_counts"][1]
    assert result["met"] is False
    assert ("TTFT short: a dip: coverage fell to 50.0 % (20 of 40 pairs) in the 10 s window from +20 s after the first "
            "trained bundle (floor 75 % on windows of ≥ 20 pairs)") in result["line"]
    assert verdict(accuracy(dense([0.9, 0.92, 0.9])), 0.9)["met"] is True
    thin = run(30, 1.0, phase="prior", start=-30) + dense([0.95, 0.0, 0.95, 0.95, 0.95, 0.95], per_window=19)
    assert "dip" not in verdict(accuracy(thin), 0.9)["judged"]["short"]["ttft"]["misses"]  # 19 pairs: not judged


def test_too_low_and_a_dip_are_both_reported() -> None:
    j = judge(accuracy(dense([0.9, 0.5, 0.9, 0.5, 0.9]))["short"]["ttft"], 0.9)
    assert list(j["misses"]) == ["too low", "dip"] and j["met"] is False


def test_the_summary_keeps_pairs_coverage_interval_and_windows_per_pool_and_target() -> None:
    result = verdict(accuracy(run(200, 0.9)), 0.9)
    j = result["judged"]["short"]["tpot"]
    assert {k: j[k] for k in ("pairs", "covered", "coverage", "interval", "interval_counts", "judged", "met",
                              "misses")} == {"pairs": 200, "covered": 180, "coverage": 0.9, "interval": [0.84, 0.95],
                                             "interval_counts": [168, 190], "judged": True, "met": True, "misses": {}}
    assert j["windows"]["floor"] == 0.75 and j["windows"]["width_s"] == 10.0 and "windows" in j["windows"]
    assert (result["level"], result["min_pairs"]) == (0.99, MIN_PAIRS)
    assert verdict({}, 0.9)["line"] == ("No predictions to judge against the p90 coverage target (per pool and "
                                        "target: within the two-sided 99 % binomial interval for its pairs, and no "
                                        "10 s window of ≥ 20 pairs below 75 % after the first trained bundle; "
                                        "router-measured latency vs the prediction at dispatch): every decision "
                                        "fell back.")
