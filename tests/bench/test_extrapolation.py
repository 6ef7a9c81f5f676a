"""bench.trainer.extrapolation: the families' true p90 is a p90, and a small run through real servers stays in band."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.common.results import KEYS
from bench.trainer.extrapolation import BAND, main
from bench.trainer.families import FAMILIES, MULTIPLES, SLOW, TARGETS, sample


@pytest.mark.parametrize("family", list(FAMILIES.values()), ids=lambda f: f.name)
@pytest.mark.parametrize("target", list(TARGETS.values()), ids=lambda t: t.name)
def test_the_true_p90_covers_nine_rows_in_ten_at_every_load(family, target):
    rng = np.random.default_rng(3)
    n = 20_000
    for k in (0.5, 8.0):
        drawn = sample(family, target, np.full(n, k * target.cap), rng, labelled=True)
        y = np.array([row[f"actual_{target.name}_ms"] for row in drawn.rows])
        assert abs(np.mean(y <= drawn.p90) - 0.9) < 4 * np.sqrt(0.09 / n), (k, np.mean(y <= drawn.p90))
        assert (drawn.p90 > 0).all()


def test_the_load_moves_the_work_features_and_kv_use_saturates_below_one():
    rng = np.random.default_rng(0)
    load = np.array([1.0, 8.0]) * TARGETS["ttft"].cap
    ttft = sample(FAMILIES["linear_lognormal"], TARGETS["ttft"], np.repeat(load, 500), rng, labelled=False)
    waiting = np.array([r["num_request_waiting"] for r in ttft.rows]).reshape(2, -1).mean(axis=1)
    assert waiting[1] / waiting[0] == pytest.approx(8.0, rel=0.05)
    tpot = sample(FAMILIES["two_classes"], TARGETS["tpot"], np.full(2000, 8.0 * TARGETS["tpot"].cap), rng,
                  labelled=False)
    kv = np.array([r["kv_cache_percentage"] for r in tpot.rows])
    assert 0.85 < np.median(kv) < 1.0 and kv.max() <= 1.0
    slow = np.array([r.get("pod_class") == SLOW for r in tpot.rows])
    assert 0.45 < slow.mean() < 0.55
    assert np.median(tpot.p90[slow]) / np.median(tpot.p90[~slow]) == pytest.approx(1.6, rel=0.05)


@pytest.mark.timeout(120)
def test_a_small_run_through_real_servers_keeps_the_8x_p90_in_band(tmp_path: Path, capsys) -> None:
    out = tmp_path / "extrapolation.json"
    main(["--families", "linear_lognormal,two_classes", "--train-rows", "3000", "--test-rows", "100",
          "--out", str(out)])
    doc = json.loads(out.read_text())
    assert set(doc) == set(KEYS) and doc["benchmark"] == "extrapolation" and doc["commit"]
    assert doc["machine"]["cores"] >= 1 and doc["machine"]["cpu_model"]
    assert [t["name"] for t in doc["figures"]["trees"]] == ["checkout"]
    got = {(r["family"], r["target"]): r for r in doc["figures"]["results"]}
    assert set(got) == {(f, t) for f in ("linear_lognormal", "two_classes") for t in TARGETS}
    for r in got.values():
        assert r["served"]["version"] > 1 and r["served"]["rows"] == 3000  # trained on every row, not the prior
        assert [int(k) for k in r["multiples"]] == list(MULTIPLES)
        assert all(f["n"] == 100 and f["p10"] <= f["median"] <= f["p90"] for f in r["multiples"].values())
    for target in TARGETS:
        at_8x = got[("linear_lognormal", target)]["multiples"]["8"]
        assert BAND[0] <= at_8x["median"] <= BAND[1], (target, at_8x)
        assert at_8x["in_band"] is True
    assert "| checkout | linear_lognormal | ttft |" in capsys.readouterr().out
