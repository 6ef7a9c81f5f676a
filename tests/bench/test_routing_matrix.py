"""bench.router.matrix on a tiny subset: the JSON's shape, the verdicts, the table and the plot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.common.results import KEYS, flat
from bench.router.matrix import main
from bench.router.matrix_report import cell_verdict, headroom_share, table

POLICIES = ("least-queue", "prefix-affinity", "predicted-latency", "clairvoyant")
QUANTILES = {"p50", "p90", "p99"}


@pytest.mark.timeout(300)
def test_a_small_matrix_writes_every_cell_policy_and_verdict(tmp_path: Path) -> None:
    out, png, csv_dir = tmp_path / "m.json", tmp_path / "m.png", tmp_path / "csv"
    assert main(["--cells", "conv:8,code:4", "--policies", ",".join(POLICIES), "--limit", "150",
                 "--window", "code=600:900", "--out", str(out), "--plot", str(png),
                 "--requests-csv-dir", str(csv_dir)]) == 0
    envelope = json.loads(out.read_text())
    assert set(envelope) == set(KEYS) and envelope["benchmark"] == "routing-matrix" and envelope["commit"]
    doc = flat(envelope)
    assert doc["settings"]["cells"] == ["conv@8x", "code@4x"] and doc["settings"]["seeds"] == [0]
    assert doc["settings"]["policies"] == list(POLICIES)
    assert set(doc["cells"]) == {"conv@8x", "code@4x"}
    assert doc["settings"]["windows"] == {"code": {"start_s": 600.0, "duration_s": 900.0}}
    assert doc["cells"]["code@4x"]["slo_ttft_ms"] == 1000.0 and doc["cells"]["conv@8x"]["slo_ttft_ms"] == 500.0
    for cell in doc["cells"].values():
        run = cell["seeds"]["0"]
        assert run["requests"] == 150 and list(run["policies"]) == list(POLICIES)
        for name, m in run["policies"].items():
            assert set(m["ttft_ms"]) == QUANTILES and set(m["tpot_ms"]) == QUANTILES
            assert 0.0 <= m["slo_attainment"] <= 1.0 and m["completed"] + m["shed"] == 150
            if name in ("least-queue", "prefix-affinity"):
                assert m["served_coverage"] is None  # no predictions (predicted-latency: none before its first fit)
        assert set(run["policies"]["clairvoyant"]["served_coverage"]) == {"ttft"}  # its forecast, TTFT only
        assert set(run["policies"]["clairvoyant"]["policy_status"]) >= {"forks", "ms_per_decision"}
        verdict = run["verdict"]
        assert verdict["best_heuristic_p99"]["policy"] in ("least-queue", "prefix-affinity")
        assert set(verdict["targets"]) == {"p99_le_least_queue", "p99_le_0.80_best_heuristic",
                                           "attainment_ge_best_heuristic_minus_0.5", "served_coverage_ttft_ge_0.85",
                                           "served_coverage_tpot_ge_0.80", "cv_share_ge_0.5"}
    assert png.stat().st_size > 10_000
    assert len(list(csv_dir.glob("*.csv"))) == 2 * len(POLICIES)
    text = table(doc)
    assert "| conv@8x | 0 |" in text and "| code@4x | predicted-latency |" not in text
    assert "code trace s 600–1500" in text


def _m(p99: float, slo: float = 0.9, cov: dict[str, float] | None = None) -> dict[str, object]:
    return {"ttft_ms": {"p50": 1.0, "p90": 2.0, "p99": p99}, "slo_attainment": slo, "served_coverage": cov}


def test_headroom_share_and_targets() -> None:
    pols = {"least-queue": _m(1000), "load-prefix": _m(900, 0.95), "clairvoyant": _m(600),
            "predicted-latency": _m(800, 0.96, {"ttft": 0.9, "tpot": 0.87})}
    assert headroom_share(pols) == pytest.approx(0.5)
    v = cell_verdict(pols, "conv@8x")
    assert v["best_heuristic_p99"] == {"policy": "load-prefix", "p99_ttft_ms": 900.0}
    assert v["pl_p99_vs_best_heuristic"] == pytest.approx(0.8889, abs=1e-4)
    assert v["targets"] == {"p99_le_least_queue": True, "p99_le_0.80_best_heuristic": False,
                            "attainment_ge_best_heuristic_minus_0.5": True, "served_coverage_ttft_ge_0.85": True,
                            "served_coverage_tpot_ge_0.80": True, "cv_share_ge_0.5": True}
    low = {**pols, "predicted-latency": _m(1050, 0.944, {"ttft": 0.84, "tpot": 0.79})}
    assert cell_verdict(low, "code@3x")["targets"] == {
        "p99_le_least_queue": False, "p99_le_0.80_best_heuristic": None,  # the ratio target: conv 6x, 8x only
        "attainment_ge_best_heuristic_minus_0.5": False, "served_coverage_ttft_ge_0.85": False,
        "served_coverage_tpot_ge_0.80": False, "cv_share_ge_0.5": False}
    small_gain = {**pols, "clairvoyant": _m(950)}  # the clairvoyant gains 5 % of least-queue's P99: no share target
    assert cell_verdict(small_gain, "code@3x")["targets"]["cv_share_ge_0.5"] is None
    assert headroom_share({**pols, "clairvoyant": _m(1100)}) is None  # no headroom: no share


def test_the_plot_clips_only_an_outlier_bar() -> None:
    from bench.router.matrix_report import clip_top

    assert clip_top([3000, 2900, 5700, 2800]) == pytest.approx(1.3 * 3000)
    assert clip_top([3000, 2900, 4700, 2800]) is None  # 1.57x the second: kept
    assert clip_top([1000]) is None
