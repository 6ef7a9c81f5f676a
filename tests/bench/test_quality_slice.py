"""A small slice of the accuracy suite (bench/quality): truths, metrics, holdout split, adapters, CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.quality import suite
from bench.quality.adapters import V1, Proposed, Trainer
from bench.quality.additive import Additive
from bench.quality.family import QUANTILES, Split
from bench.quality.heavytail import HeavyTail
from bench.quality.heteroscedastic import Heteroscedastic
from bench.quality.metrics import score
from bench.quality.noise import spiked, spiked_quantiles
from bench.quality.nonadditive import NonAdditive
from bench.quality.proposed import DesignParams, holdout_split
from bench.quality.simreplay import SimReplay
from bench.quality.threshold import Threshold
from shared.features import FEATURE_FIELDS

ANALYTIC = [Additive(), NonAdditive(), Heteroscedastic(), HeavyTail(), Threshold()]


@pytest.mark.parametrize("family", ANALYTIC, ids=lambda f: f.name)
@pytest.mark.parametrize("target", ["ttft", "tpot"])
def test_true_quantiles_cover_their_level(family, target):
    split = family.test(target, 40_000, seed=5)
    assert {f.name for f in FEATURE_FIELDS if f.required} <= set(split.cols)
    assert split.truth is not None
    for alpha in QUANTILES:
        covered = float(np.mean(split.y <= split.truth[alpha]))
        assert abs(covered - alpha) < 4 * np.sqrt(alpha * (1 - alpha) / len(split)) + 1e-3, (alpha, covered)
    assert (split.truth[0.5] <= split.truth[0.9]).all() and (split.truth[0.9] <= split.truth[0.99]).all()


def test_spike_mixture_quantile_matches_monte_carlo():
    rng = np.random.default_rng(0)
    median, p = np.full(300_000, 50.0), np.full(300_000, 0.04)
    y = spiked(median, 0.2, p, rng)
    q = spiked_quantiles(median[:1], 0.2, p[:1], (0.9, 0.99))
    assert q[0.9][0] == pytest.approx(np.quantile(y, 0.9), rel=0.01)
    assert q[0.99][0] == pytest.approx(np.quantile(y, 0.99), rel=0.03)


def test_oracle_scores_one_and_a_biased_model_worse():
    split = NonAdditive().test("ttft", 20_000, seed=1)
    assert split.truth is not None
    oracle = score(split, dict(split.truth))
    biased = score(split, {a: v * 1.2 for a, v in split.truth.items()})
    for alpha in QUANTILES:
        assert oracle[alpha]["pinball_ratio"] == pytest.approx(1.0)
        assert oracle[alpha]["mape"] == pytest.approx(0.0)
        assert biased[alpha]["pinball_ratio"] > 1.0
        assert biased[alpha]["mape"] == pytest.approx(0.2)


def test_holdout_split_is_disjoint_newest_and_stratified():
    n = 10_000
    strata = np.random.default_rng(0).integers(0, 50, n)
    p = DesignParams(holdout_newest=500, holdout_stratified=500, max_fit_rows=6_000)
    fit, stop, cal = holdout_split(n, strata, p, np.random.default_rng(1))
    hold = np.concatenate([stop, cal])
    assert len(np.intersect1d(fit, hold)) == 0 and len(np.intersect1d(stop, cal)) == 0
    assert set(range(n - 500, n)) <= set(hold.tolist())
    older = hold[hold < n - 500]
    assert len(older) == 500 and set(strata[older].tolist()) == set(range(50))
    assert len(fit) == 6_000


@pytest.mark.parametrize("model", [Trainer(), V1(), Proposed()], ids=lambda m: m.name)
def test_adapters_answer_every_quantile_without_crossing(model):
    train = Additive().train("ttft", 3_000, seed=0)
    test = Additive().test("ttft", 5_000, seed=0)
    fitted = model.fit("ttft", train, QUANTILES)
    preds = fitted.predict(test.cols)
    assert sorted(preds) == list(QUANTILES)
    scores = score(test, preds)
    assert 0.8 < scores[0.9]["coverage"] < 0.97
    assert scores[0.9]["mape"] < 0.15
    if model.name == "proposed":
        assert (preds[0.5] <= preds[0.9]).all() and (preds[0.9] <= preds[0.99]).all()
        assert fitted.info["chosen"] in {"d6", "d3-mono"}


def test_sim_family_keeps_test_runs_apart(tmp_path):
    family = SimReplay(cache=tmp_path / "unused.npz", limit=150)
    pools = family.pools()
    assert len(pools["train"]) == 3 * len(pools["test"]) > 0
    train = family.train("ttft", 400, seed=0)
    assert isinstance(train, Split) and train.truth is None and (train.y > 0).all()
    with pytest.raises(ValueError, match="training rows asked"):
        family.train("ttft", 10**6, seed=0)
    assert not (tmp_path / "unused.npz").exists()


def test_cli_quick_run_writes_records(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert suite.main(["--quick", "--families", "threshold", "--models", "proposed", "--out", str(out)]) == 0
    records = json.loads(out.read_text())["figures"]["records"]
    assert {(r["target"], r["quantile"]) for r in records} == {(t, q) for t in ("ttft", "tpot") for q in QUANTILES}
    assert "### threshold" in capsys.readouterr().out


def test_cli_rejects_unknown_names():
    with pytest.raises(SystemExit):
        suite.main(["--families", "nope"])
