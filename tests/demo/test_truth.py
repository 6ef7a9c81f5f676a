"""``demo.truth``: joins, phases, covered counts, the client's latency split into parts that add up, and the
windows after the first trained bundle."""

from __future__ import annotations

import pytest

from demo.load import Record
from demo.truth import PARTS, accuracy, join, overhead, stats
from demo.watch import BundleSeen
from tests.demo.joined import dense, run


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


def test_stats_count_the_covered_pairs_and_measured_at_the_prediction_counts_as_covered() -> None:
    s = stats([(100.0, 50.0), (100.0, 100.0), (100.0, 100.5)])
    assert (s["pairs"], s["covered"], s["coverage"]) == (3, 2, 0.6667)
    assert stats([]) == {"pairs": 0}


def test_accuracy_splits_by_pool_phase_half_and_pod() -> None:
    acc = accuracy(run(40, 0.5, phase="prior") + run(160, 1.0, start=40) + run(50, 0.8, pool="long"))
    short = acc["short"]["ttft"]
    assert (short["pairs"], short["covered"]) == (200, 180)
    assert (short["prior"]["covered"], short["trained"]["covered"]) == (20, 160)
    assert (short["first_half"]["covered"], short["second_half"]["covered"]) == (80, 100)
    assert set(short["by_pod"]) == {"http://pod-0", "http://pod-1"}
    assert (acc["long"]["tpot"]["pairs"], acc["long"]["tpot"]["covered"]) == (50, 40)


def test_windows_are_counted_from_the_first_trained_request_and_thin_ones_are_not_judged() -> None:
    joined = run(30, 1.0, phase="prior", start=-30) + dense([0.9, 0.0, 0.9], per_window=19)
    w = accuracy(joined)["short"]["ttft"]["windows"]
    assert w["judged"] == 0 and w["min_coverage"] is None and w["windows"][1]["coverage"] == 0.0
    assert accuracy(run(50, 1.0, phase="prior"))["short"]["ttft"]["windows"]["windows"] == []


def test_the_lowest_judged_window_is_found_with_where_it_starts() -> None:
    a = accuracy(run(40, 1.0, phase="prior", start=-40) + dense([0.95, 0.95, 0.5, 0.95, 0.95, 0.95, 1.0]))
    w = a["short"]["ttft"]["windows"]
    assert [x["from_s"] for x in w["windows"]] == [10.0 * k for k in range(7)]
    assert (w["judged"], w["min_coverage"], w["min_from_s"]) == (7, 0.5, 20.0)
