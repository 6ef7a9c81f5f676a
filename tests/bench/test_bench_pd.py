"""bench.pd.routing on a tiny slice: the load search stops at the first miss, every variant and both aggregated
replays run at the chosen load, the targets have their verdicts, the JSON and the PNG are written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.pd.report import CPU_PAIRS, VARIANTS, cell_targets
from bench.pd.routing import main


@pytest.mark.timeout(600)
def test_bench_pd_shape(tmp_path: Path) -> None:
    out, png, csvs = tmp_path / "pd.json", tmp_path / "pd.png", tmp_path / "csv"
    code = main(["--presets", "llama3-8b-a100", "--traces", "conv", "--duration", "45", "--rates", "1,2,400",
                 "--jobs", "1", "--policy-opt", "min_samples=20", "--policy-opt", "retrain_interval_s=5",
                 "--policy-opt", "rounds=10", "--requests-csv-dir", str(csvs), "--out", str(out), "--plot", str(png)])
    assert code == 0 and png.stat().st_size > 10_000
    (cell,) = json.loads(out.read_text())["figures"]["cells"]
    assert [s["rate_scale"] for s in cell["load_search"]] == [1.0, 2.0, 400.0]
    assert [s["ok"] for s in cell["load_search"]] == [True, True, False], "x400 saturates two decode pods"
    assert cell["rate_scale"] == 2.0 and cell["pd"] == "4:2" and cell["slo_ttft_ms"] == 1000.0
    names = [n for n, _, _ in VARIANTS] + ["aggregated/load-prefix", "aggregated/predicted-latency"]
    assert list(cell["runs"]) == names
    for run in cell["runs"].values():
        assert run["completed"] == run["requests"] > 20 and run["cpu_s"] > 0
    for name in names[1:5]:
        assert cell["runs"][name]["policy_status"]["retrains"] > 0, name
        assert {"p99_ttft_ratio", "p99_met", "p50_ttft_ratio", "p50_met", "tpot_p50_ratio", "tpot_met"} \
            == set(cell["targets"]["variants"][name])
    assert cell["runs"]["pd-predicted-latency/split"]["policy_status"]["trainers"] == "split"
    assert set(cell["targets"]["cpu"]) == {pd for pd, _ in CPU_PAIRS}
    assert len(list(csvs.glob("*.csv"))) == len(VARIANTS)


def test_targets_are_judged_against_pd_load_prefix() -> None:
    def run(p99: float, p50: float, tpot: float, cpu: float = 1.0) -> dict[str, object]:
        return {"ttft_ms": {"p99": p99, "p50": p50}, "tpot_ms": {"p50": tpot}, "cpu_s": cpu}

    runs = {"pd-load-prefix": run(1000, 200, 20, cpu=3.0), "pd-predicted-latency": run(500, 170, 21, cpu=4.0),
            "pd-predicted-latency/split": run(501, 160, 20), "pd-predicted-latency-slo": run(100, 171, 20),
            "pd-predicted-latency-slo/split": run(100, 100, 22), "aggregated/load-prefix": run(1, 1, 1, cpu=1.5),
            "aggregated/predicted-latency": run(1, 1, 1, cpu=1.9)}
    t = cell_targets(runs)
    v = t["variants"]
    assert (v["pd-predicted-latency"]["p99_met"], v["pd-predicted-latency"]["p50_met"],
            v["pd-predicted-latency"]["tpot_met"]) == (True, True, True)
    assert not v["pd-predicted-latency/split"]["p99_met"] and not v["pd-predicted-latency-slo"]["p50_met"]
    assert not v["pd-predicted-latency-slo/split"]["tpot_met"]
    assert t["cpu"]["pd-load-prefix"]["ratio"] == 2.0 and t["cpu"]["pd-load-prefix"]["met"]
    assert not t["cpu"]["pd-predicted-latency"]["met"]
