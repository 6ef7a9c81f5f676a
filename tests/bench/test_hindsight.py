"""``bench.trainer.hindsight``: the demo verdict's rule on (prediction, actual) pairs, and the hindsight p90."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.trainer import hindsight
from bench.trainer.hindsight import POOLS, hindsight_p90, judged, main, totals, window_ids
from trainer.store.log import LogLimits, SampleLog
from trainer.store.record import STORED_FIELDS


def test_windows_are_ten_seconds_from_the_first_trained_bundle_and_minus_one_before() -> None:
    at = np.array([0.0, 3.9, 4.0, 13.9, 14.0, 35.0])
    assert window_ids(at, 4.0).tolist() == [-1, -1, 0, 0, 1, 3]


def test_judged_passes_a_calibrated_run_and_fails_one_low_window() -> None:
    rng = np.random.default_rng(0)
    y = rng.lognormal(size=400)
    pred = np.full(400, float(np.quantile(y, 0.9)))
    windows = np.repeat(np.arange(8), 50)
    assert judged(pred, y, windows)["met"]
    low = pred.copy()
    low[:50] = np.quantile(y[:50], 0.6)  # one 50-pair window covers 60 %
    j = judged(low, y, windows)
    assert not j["met"] and j["lowest_window"] < 0.75


def test_pairs_without_a_served_prediction_are_left_out() -> None:
    y = np.ones(40)
    pred = np.full(40, 2.0)
    pred[:5] = np.nan
    assert judged(pred, y, np.zeros(40, int))["pairs"] == 35


def test_windows_before_the_first_trained_bundle_or_under_twenty_pairs_are_not_judged() -> None:
    y = np.ones(60)
    pred = np.full(60, 2.0)
    pred[:30] = 0.5  # the prior's part: counts in the coverage, not as a window
    windows = np.r_[np.full(30, -1), np.zeros(25, int), np.ones(5, int)]
    pred[55:] = 0.5  # a 5-pair window entirely missed
    j = judged(pred, y, windows)
    assert j["lowest_window"] == 1.0 and j["coverage"] == round(25 / 60, 4) and not j["met"]


def test_the_hindsight_p90_covers_about_ninety_percent_of_unseen_rows() -> None:
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 4, size=(1200, 2)).astype(np.float32)
    y = np.exp(1.0 + 0.5 * x[:, 0] + rng.normal(0, 0.3, 1200))
    pred = hindsight_p90(x[:1000], np.log1p(y[:1000]), x[1000:])
    assert 0.82 <= float(np.mean(y[1000:] <= pred)) <= 0.97


def test_totals_count_passes_and_the_chance_of_four_in_five() -> None:
    runs = {str(i): {"served_met": i < 3, "hindsight_met": True} for i in range(4)}
    t = totals(runs)
    assert t["served_passed"] == 3 and t["hindsight_passed"] == 4 and t["hindsight_chance_4_of_5"] == 1.0
    assert 0.0 < t["served_chance_4_of_5"] < 1.0


def _demo_workdir(root: Path, rng: np.random.Generator) -> Path:
    """A make demo work directory in miniature: each pool's durable sample log and the per-request CSV."""
    lines = ["request_id,pool,pod,dispatched_s,phase,predicted_ttft_ms,raw_predicted_ttft_ms,ttft_ms,"
             "predicted_tpot_ms,raw_predicted_tpot_ms,tpot_ms"]
    for pool in POOLS:
        n = 120
        m = np.zeros((n, len(STORED_FIELDS)))
        prompt = rng.integers(100, 4000, n)
        m[:, STORED_FIELDS.index("input_token_length")] = prompt
        ttft = 5.0 + prompt / 100.0 * rng.lognormal(0, 0.2, n) + rng.uniform(0, 1e-3, n)
        tpot = 3.0 * rng.lognormal(0, 0.2, n)
        m[:, STORED_FIELDS.index("actual_ttft_ms")] = ttft
        m[:, STORED_FIELDS.index("actual_tpot_ms")] = tpot
        log = SampleLog(root / f"trainer-{pool}" / "log", LogLimits())
        try:
            for _ in log.replay():
                pass
            log.append_rows(m)
        finally:
            log.close()
        for i in range(n):
            at = i * 0.5
            lines.append(f"r{pool}{i},{pool},p,{at},{'prior' if at < 5 else 'trained'},{ttft[i] * 1.5},{ttft[i] * 1.5},"
                         f"{ttft[i]},{tpot[i] * 1.5},{tpot[i] * 1.5},{tpot[i]}")
    (root / "requests.csv").write_text("\n".join(lines) + "\n")
    return root


def test_a_run_is_judged_served_and_with_hindsight_from_its_files(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hindsight, "DEPTHS", (2, 4))
    monkeypatch.setattr(hindsight, "ROUNDS", 30)
    run = _demo_workdir(tmp_path / "run", np.random.default_rng(2))
    out = tmp_path / "h.json"
    main(["--run", str(run), "--out", str(out)])
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "hindsight"
    r = doc["figures"]["runs"][str(run)]
    long_tpot = r["long/tpot"]
    assert long_tpot["served"]["pairs"] == 120 and long_tpot["served"]["coverage"] == 1.0
    assert not r["served_met"]  # a p90 1.5x every actual is too loose for the interval
    assert set(long_tpot["by_depth"]) == {"2", "4"} and doc["settings"]["depths"] == [2, 4]
    assert 0.75 <= long_tpot["hindsight"]["coverage"] <= 1.0
    assert doc["figures"]["totals"]["runs"] == 1


def test_a_directory_that_is_no_demo_run_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        main(["--run", str(tmp_path), "--out", str(tmp_path / "h.json")])


def test_received_times_are_aligned_to_the_dispatch_clock_and_never_before_dispatch() -> None:
    at = np.arange(200, dtype=float)
    delay = 0.2 + (np.arange(200) % 10) * 0.1  # the fastest rows arrive 0.2 s after dispatch
    wall = 1_000.0 + at + delay
    wall[7] = 900.0  # a stray match: one row "received" long before it was sent
    got = hindsight.received_at(wall, at)
    ok = np.arange(200) != 7
    assert np.allclose(got[ok], at[ok] + delay[ok] - 0.2, atol=1e-6) and got[7] == at[7]


def _rows(y: np.ndarray, at: np.ndarray, received: np.ndarray) -> hindsight.PoolRows:
    n = len(y)
    return hindsight.PoolRows(np.zeros((n, 1), np.float32), y, at, np.full(n, 99.0), np.ones(n, bool), received)


def test_a_causal_learner_knows_only_the_rows_received_before_each_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hindsight, "ROUNDS", 20)
    at = np.arange(0.0, 60.0, 0.1)
    y = np.where(at < 30.0, 10.0, 50.0)  # the level jumps at 30 s
    received = at + 5.0  # each row reaches the trainer 5 s after dispatch
    pred = hindsight.causal_p90(_rows(y, at, received), "blind", 2)
    assert np.all(pred[at < 8.0] == 99.0)  # fewer than 30 rows received: what the run served
    assert np.allclose(pred[(at >= 10.0) & (at < 35.0)], 10.0, rtol=0.05)  # the jump is not received before 35 s
    assert not np.any(y[(at >= 30.0) & (at < 35.0)] <= pred[(at >= 30.0) & (at < 35.0)])
    newest = hindsight.causal_p90(_rows(y, at, received), "newest", 2)
    assert np.all(newest[at >= 50.0] >= 45.0)  # by then the newest rows are all at the new level


def test_newest_rows_are_the_trainers_quarter_capped_at_a_hundred() -> None:
    assert len(hindsight.newest_rows(np.arange(1000.0))) == 100
    assert sorted(hindsight.newest_rows(np.arange(200.0)).tolist()) == list(range(150, 200))
    assert len(hindsight.newest_rows(np.arange(40.0))) == 20


def test_causal_ceilings_are_judged_per_learner_and_as_an_oracle_union(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hindsight, "DEPTHS", (2,))
    monkeypatch.setattr(hindsight, "CAUSAL_DEPTHS", (2,))
    monkeypatch.setattr(hindsight, "ROUNDS", 10)
    run = _demo_workdir(tmp_path / "run", np.random.default_rng(3))
    out = tmp_path / "h.json"
    main(["--run", str(run), "--out", str(out), "--causal"])
    doc = json.loads(out.read_text())
    r = doc["figures"]["runs"][str(run)]
    assert set(r["long/ttft"]["causal"]) == {"blind2", "newest2"} and set(r["causal_met"]) == {"blind2", "newest2"}
    # every log row was written at once, after the run: no causal learner has a row before the end, so each
    # serves what the run served — and fails with it
    assert r["long/ttft"]["causal"]["blind2"]["coverage"] == r["long/ttft"]["served"]["coverage"] == 1.0
    assert not r["causal_union_met"]
    t = doc["figures"]["totals"]
    assert t["causal_blind2_passed"] == 0 and t["causal_union_passed"] == 0 and doc["settings"]["step_s"] == 1.0
