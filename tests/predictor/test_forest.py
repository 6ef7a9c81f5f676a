"""The numpy evaluator is bit-equal to XGBoost's inplace_predict, or refuses to compile."""

from __future__ import annotations

import numpy as np
import pytest
import xgboost as xgb

from predictor.forest import Unsupported, compile_forest
from predictor.serving import probe_matrix
from shared.features import MODEL_NAMES, FeatureSpec
from tests.predictor.conftest import ALL_SPECS, columns, random_rows, train_booster


def _xgb(booster: xgb.Booster, matrix: np.ndarray) -> np.ndarray:
    return np.asarray(booster.inplace_predict(matrix, validate_features=False), dtype=np.float32)


def _inputs(spec: FeatureSpec, name: str, booster: xgb.Booster, seed: int) -> np.ndarray:
    """Random raw rows plus rows sitting exactly on / next to every threshold the model uses."""
    random_part = spec.matrix(name, columns(random_rows(300, seed)))
    return np.vstack([random_part, probe_matrix(compile_forest(booster), rows=300, seed=seed)])


@pytest.mark.parametrize("spec", ALL_SPECS, ids=lambda s: f"tif={s.token_in_flight},enc={s.encoder}")
@pytest.mark.parametrize(("trees", "depth"), [(1, 1), (5, 3), (30, 6), (12, 8)])
def test_bit_equal_for_every_flag_combination_and_shape(spec: FeatureSpec, trees: int, depth: int) -> None:
    for i, name in enumerate(MODEL_NAMES):
        booster = train_booster(spec, name, trees, depth, seed=trees * 7 + depth + i)
        matrix = _inputs(spec, name, booster, seed=i)
        np.testing.assert_array_equal(compile_forest(booster).predict(matrix), _xgb(booster, matrix))


@pytest.mark.parametrize("objective", ["reg:squarederror", "reg:absoluteerror", "reg:quantileerror"])
def test_objectives_with_identity_link_and_base_score(objective: str) -> None:
    spec = FeatureSpec()
    booster = train_booster(spec, "ttft", 20, 5, seed=3, objective=objective)
    forest = compile_forest(booster)
    assert forest.base_score != 0  # XGBoost estimated it from the targets; it must be included
    matrix = _inputs(spec, "ttft", booster, seed=5)
    np.testing.assert_array_equal(forest.predict(matrix), _xgb(booster, matrix))


def test_values_exactly_at_thresholds_go_right() -> None:
    """x < threshold → left; x == threshold → right (float32 comparison)."""
    x = np.array([[0.0], [1.0], [2.0], [3.0]], dtype=np.float32)
    booster = xgb.train({"max_depth": 1, "eta": 1.0, "base_score": 0.0, "nthread": 1, "min_child_weight": 0},
                        xgb.DMatrix(x, label=np.array([0.0, 0.0, 10.0, 10.0])), 1)
    forest = compile_forest(booster)
    cut = forest.thr[np.isfinite(forest.thr)][0]
    probe = np.array([[cut], [np.nextafter(cut, np.float32(-1))], [np.nextafter(cut, np.float32(9))]],
                     dtype=np.float32)
    out = forest.predict(probe)
    np.testing.assert_array_equal(out, _xgb(booster, probe))
    assert out[0] == out[2] != out[1]


def test_constant_target_single_leaf_trees() -> None:
    x = np.random.default_rng(0).random((50, 3)).astype(np.float32)
    booster = xgb.train({"max_depth": 3, "nthread": 1, "base_score": 0.0}, xgb.DMatrix(x, label=np.full(50, 7.0)),
                        3)
    forest = compile_forest(booster)
    assert forest.depth == 0 and len(set(forest.leaf.tolist())) == 3
    np.testing.assert_array_equal(forest.predict(x), _xgb(booster, x))


def test_unsupported_models_refuse_to_compile() -> None:
    rng = np.random.default_rng(1)
    x, y = rng.random((200, 4)).astype(np.float32), rng.random(200)
    logistic = xgb.train({"objective": "reg:logistic", "nthread": 1}, xgb.DMatrix(x, label=y), 2)
    vector_leaf = xgb.train({"objective": "reg:squarederror", "multi_strategy": "multi_output_tree",
                            "tree_method": "hist", "nthread": 1}, xgb.DMatrix(x, label=np.column_stack([y, y])), 2)
    dart = xgb.train({"booster": "dart", "nthread": 1}, xgb.DMatrix(x, label=y), 2)
    cat_x = np.column_stack([x[:, :3], rng.integers(0, 4, 200)]).astype(np.float32)
    cats = xgb.train({"nthread": 1, "tree_method": "hist", "max_cat_to_onehot": 1},
                     xgb.DMatrix(cat_x, label=y * cat_x[:, 3], feature_types=["q", "q", "q", "c"],
                                 enable_categorical=True), 3)
    deep = xgb.train({"max_depth": 14, "nthread": 1, "min_child_weight": 0, "lambda": 0},
                     xgb.DMatrix(rng.random((3000, 4)).astype(np.float32), label=rng.random(3000)), 1)
    for booster in (logistic, vector_leaf, dart, cats, deep):
        with pytest.raises(Unsupported):
            compile_forest(booster)


@pytest.mark.parametrize(("trees", "depth"), [(0, 3), (1, 1), (20, 4), (60, 6)])
def test_multi_quantile_boosters_are_bit_equal_per_output(trees: int, depth: int) -> None:
    """One booster, one output column per quantile (one output per tree): every column bit-equal."""
    spec = FeatureSpec()
    for i, name in enumerate(MODEL_NAMES):
        x = spec.matrix(name, columns(random_rows(1500, 11 + i)))
        y = np.asarray(x[:, 2], dtype=np.float64) * 0.05 + np.random.default_rng(i).gamma(2.0, 5.0, len(x))
        booster = xgb.train({"objective": "reg:quantileerror", "quantile_alpha": np.array([0.5, 0.9, 0.99]),
                             "max_depth": depth, "tree_method": "hist", "nthread": 1},
                            xgb.QuantileDMatrix(x, y), trees)
        forest = compile_forest(booster)
        assert forest.n_outputs == 3 and forest.n_trees == 3 * trees
        matrix = np.vstack([x[:200], probe_matrix(forest, rows=200, seed=i)]) if trees else x[:200]
        np.testing.assert_array_equal(forest.predict(matrix), _xgb(booster, matrix).reshape(len(matrix), 3))


def test_large_batches_are_walked_in_chunks_with_the_same_result() -> None:
    spec = FeatureSpec()
    booster = train_booster(spec, "tpot", 10, 4, seed=9)
    matrix = spec.matrix("tpot", columns(random_rows(2500, 4)))
    np.testing.assert_array_equal(compile_forest(booster).predict(matrix), _xgb(booster, matrix))
