"""The demo's judgement of the predictions (``demo.truth``): joins, phases, the client's latency split into
parts that add up, and a verdict line that names the reason a target was missed."""

from __future__ import annotations

import pytest

from demo.load import Record
from demo.truth import PARTS, Joined, accuracy, band_chance, in_band, join, overhead, verdict
from demo.watch import BundleSeen


def _joined(n: int, covered: float, *, raw_covered: float | None = None, phase: str = "trained",
            pool: str = "short", start: float = 0.0, predicted: float = 100.0) -> list[Joined]:
    out = []
    for i in range(n):
        ok = i < round(covered * n)
        raw_ok = ok if raw_covered is None else i < round(raw_covered * n)
        measured = predicted * (0.5 if ok else 1.5)
        raw = predicted if raw_ok == ok else (measured * (1.2 if raw_ok else 0.8))
        both = {"ttft": predicted, "tpot": predicted}
        out.append(Joined(f"r{start + i}", pool, f"http://pod-{i % 2}", start + i, both, {"ttft": raw, "tpot": raw},
                          {"ttft": measured, "tpot": measured}, None, None, phase))
    return out


@pytest.mark.parametrize(("joined", "met", "phrase"), [
    (_joined(200, 0.9), True, "Predictions MET"),
    (_joined(200, 0.99), False, "99 % is conservative (above 94 %)"),
    (_joined(200, 0.94), True, "Predictions MET"),
    (_joined(200, 0.85), False, "did NOT meet"),
    (_joined(60, 0.2, phase="prior") + _joined(200, 0.92, start=60), False,
     "untrained prior bundle served the first 60"),
    (_joined(200, 0.7, raw_covered=0.9), False, "the per-pod correction lowered it"),
    (_joined(100, 0.5, start=0) + _joined(100, 0.95, start=100), False, "still learning: first half 50 %"),
    (_joined(20, 1.0), False, "too few pairs to judge TTFT short (20 pairs)"),
])
def test_verdict_names_the_reason(joined: list[Joined], met: bool, phrase: str) -> None:
    result = verdict(accuracy(joined), 0.9)
    assert result["met"] is met and phrase in result["line"], result["line"]
    assert "\n" not in result["line"]


def test_a_miss_without_a_simpler_explanation_points_at_the_latency_and_the_worst_pod() -> None:
    line = verdict(accuracy(_joined(200, 0.6)), 0.9)["line"]
    assert "did NOT meet" in line and "ran above the predictions" in line and "lowest pod pod-" in line


def test_the_band_is_the_quantile_plus_or_minus_four_points_on_thirty_pairs_or_more() -> None:
    assert in_band({"pairs": 30, "coverage": 0.86}, 0.9) and in_band({"pairs": 30, "coverage": 0.94}, 0.9)
    assert not in_band({"pairs": 30, "coverage": 0.85}, 0.9) and not in_band({"pairs": 30, "coverage": 0.95}, 0.9)
    assert not in_band({"pairs": 29, "coverage": 0.9}, 0.9)


def test_band_chance_is_the_binomial_mass_of_the_band() -> None:
    assert band_chance(39, 0.9) == pytest.approx(0.572, abs=1e-3)  # k in 34..36 of Bin(39, 0.9)
    assert band_chance(300, 0.9) == pytest.approx(0.984, abs=1e-3) and band_chance(5000, 0.9) == pytest.approx(1.0)
    assert band_chance(60, 0.9) < band_chance(100, 0.9) < band_chance(200, 0.9) and band_chance(0, 0.9) == 0.0
    assert band_chance(10, 0.5, 0.5) == pytest.approx(1.0)


def test_the_verdict_says_when_its_pairs_are_too_few_for_the_band_to_be_sure() -> None:
    thin = verdict(accuracy(_joined(40, 0.8)), 0.9)
    expected = "on 40 pairs a perfectly calibrated p90 lands in the band only 57 % of the time"
    assert expected in thin["line"], thin["line"]
    assert thin["band_chance"] == {"ttft short": round(band_chance(40, 0.9), 3),
                                   "tpot short": round(band_chance(40, 0.9), 3)}
    assert "perfectly calibrated" not in verdict(accuracy(_joined(400, 0.8)), 0.9)["line"]


def test_join_splits_the_client_ttft_into_parts_that_add_up_and_finds_the_phase() -> None:
    rec = Record(0, 0.0, "demo-0", 1000.000, status=200, pool="short", pod="p", ttft_ms=80.0)
    rec.written_wall = 1000.004
    routed = {"demo-0": {"pool": "short", "pod": "p", "received_at": 1000.010, "dispatched_at": 1000.016,
                         "first_token_at": 1000.066, "predicted_ttft_ms": 60.0, "predicted_tpot_ms": 5.0,
                         "raw_predicted_ttft_ms": 55.0, "raw_predicted_tpot_ms": 5.0, "ttft_ms": 50.0, "tpot_ms": 4.0,
                         "error": None}}
    bundles = [BundleSeen("short", 1, 0.0, None, None, 999.0, True), BundleSeen("short", 2, 1.0, None, None, 1000.01,
                                                                                False)]
    (j,) = join([rec], routed, bundles)
    assert j.phase == "trained" and j.measured == {"ttft": 50.0, "tpot": 4.0}
    assert j.parts_ms is not None and list(j.parts_ms) == list(PARTS)
    assert j.parts_ms == pytest.approx({"load generator send": 4.0, "loopback + proxy accept": 6.0,
                                        "proxy decision": 6.0, "pod (router-measured TTFT)": 50.0,
                                        "relay → load generator read": 14.0}, abs=1e-6)
    assert sum(j.parts_ms.values()) == pytest.approx(rec.ttft_ms)
    early = join([rec], {"demo-0": {**routed["demo-0"], "dispatched_at": 999.5}}, bundles)[0]
    assert early.phase == "prior"
    obs = overhead([j], [1.0, 3.0])
    assert obs["short"]["client_ttft"]["mean_ms"] == pytest.approx(80.0) and obs["load_generator_loop_lag"][
        "mean_ms"] == 2.0
    assert join([rec], {}, bundles) == []  # a request the router never recorded is not judged


def _dense(coverages: list[float], per_window: int = 40, pool: str = "short") -> list[Joined]:
    """One trained request every 10 s / ``per_window`` from t = 0, each 10 s window covered as given."""
    out = []
    for w, covered in enumerate(coverages):
        for i in range(per_window):
            ok = i < round(covered * per_window)
            both = {"ttft": 100.0, "tpot": 100.0}
            measured = {"ttft": 50.0 if ok else 150.0, "tpot": 50.0 if ok else 150.0}
            out.append(Joined(f"r{w}-{i}", pool, "http://pod-0", 10.0 * w + 10.0 * i / per_window, both, both,
                              measured, None, None, "trained"))
    return out


def test_a_dip_after_the_first_trained_bundle_fails_the_verdict_even_when_the_run_covers() -> None:
    joined = _joined(40, 1.0, phase="prior", start=-40) + _dense([0.95, 0.95, 0.5, 0.95, 0.95, 0.95, 1.0])
    acc = accuracy(joined)
    a = acc["short"]["ttft"]
    assert a["coverage"] >= 0.9 and a["windows"]["min_coverage"] == 0.5 and a["windows"]["min_from_s"] == 20.0
    assert [w["from_s"] for w in a["windows"]["windows"]] == [10.0 * k for k in range(7)]
    result = verdict(acc, 0.9)
    assert result["met"] is False
    assert "coverage fell to 50 % in the 10 s window from +20 s after the first trained bundle" in result["line"]


def test_windows_are_counted_from_the_first_trained_request_and_thin_ones_are_not_judged() -> None:
    joined = _joined(30, 1.0, phase="prior", start=-30) + _dense([0.9, 0.0, 0.9], per_window=19)
    w = accuracy(joined)["short"]["ttft"]["windows"]
    assert w["judged"] == 0 and w["min_coverage"] is None and w["windows"][1]["coverage"] == 0.0
    assert accuracy(_joined(50, 1.0, phase="prior"))["short"]["ttft"]["windows"]["windows"] == []
    assert verdict(accuracy(_dense([0.9, 0.92, 0.9])), 0.9)["met"] is True
