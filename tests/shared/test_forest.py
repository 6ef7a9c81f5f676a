"""The numpy forest is bit-equal to XGBoost's inplace_predict (location booster folded in), or refuses to compile;
its array form (shared.forest_file) and the UBJSON reader give the same trees without XGBoost."""

from __future__ import annotations

import base64
from dataclasses import replace

import numpy as np
import orjson
import pytest
import xgboost as xgb

from shared import ubjson
from shared.errors import BundleError
from shared.features import MODEL_NAMES, FeatureSpec
from shared.forest import Chained, Forest, Trees, Unsupported, compile_trees, fold, probe_matrix
from shared.forest_file import decode, encode, model_document, publish
from tests.predictor.conftest import ALL_SPECS, columns, random_rows, train_booster


def trees_of(booster: xgb.Booster) -> Trees:
    return compile_trees(orjson.loads(bytes(booster.save_raw("json"))))


def forest_of(booster: xgb.Booster) -> Forest:
    return fold(trees_of(booster))


def _xgb(booster: xgb.Booster, matrix: np.ndarray, base: np.ndarray | None = None) -> np.ndarray:
    out = np.asarray(booster.inplace_predict(matrix, validate_features=False, base_margin=base), dtype=np.float32)
    return out.reshape(len(matrix), -1)


def _inputs(spec: FeatureSpec, name: str, booster: xgb.Booster, seed: int) -> np.ndarray:
    """Random raw rows plus rows sitting exactly on / next to every threshold the model uses."""
    random_part = spec.matrix(name, columns(random_rows(300, seed)))
    return np.vstack([random_part, probe_matrix(trees_of(booster), rows=300, seed=seed)])


def _same_trees(a: Trees, b: Trees) -> None:
    assert (a.depth, a.n_features) == (b.depth, b.n_features)
    for field in ("base_score", "feat", "thr", "leaf", "output"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
        assert getattr(a, field).dtype == getattr(b, field).dtype, field


@pytest.mark.parametrize("spec", ALL_SPECS, ids=lambda s: f"tif={s.token_in_flight},enc={s.encoder}")
@pytest.mark.parametrize(("trees", "depth"), [(1, 1), (5, 3), (30, 6), (12, 8)])
def test_bit_equal_for_every_flag_combination_and_shape(spec: FeatureSpec, trees: int, depth: int) -> None:
    for i, name in enumerate(MODEL_NAMES):
        booster = train_booster(spec, name, trees, depth, seed=trees * 7 + depth + i)
        matrix = _inputs(spec, name, booster, seed=i)
        np.testing.assert_array_equal(forest_of(booster).predict(matrix), _xgb(booster, matrix))


def test_ubj_files_compile_to_the_same_trees_as_the_json_model() -> None:
    """What a predictor reads from a bundle without the array form (``.ubj``, no XGBoost) is what the trainer
    compiles from XGBoost's JSON."""
    spec = FeatureSpec()
    for i, name in enumerate(MODEL_NAMES):
        booster = train_booster(spec, name, 25, 6, seed=40 + i)
        from_ubj = compile_trees(model_document("m.ubj", bytes(booster.save_raw("ubj"))))
        _same_trees(from_ubj, trees_of(booster))
        _same_trees(compile_trees(model_document("m.json", bytes(booster.save_raw("json")))), trees_of(booster))


def test_ubjson_reader_refuses_what_is_not_ubjson() -> None:
    for bad in (b"{not a model", b"[$d#i\x05\x00", b"{i\x01a", b"Z\x00", b"\xff"):
        with pytest.raises(ValueError):
            ubjson.loads(bad)
    assert ubjson.loads(b"{i\x01aSi\x02hi}") == {"a": "hi"}


@pytest.mark.parametrize("objective", ["reg:squarederror", "reg:absoluteerror", "reg:quantileerror"])
def test_objectives_with_identity_link_and_base_score(objective: str) -> None:
    spec = FeatureSpec()
    booster = train_booster(spec, "ttft", 20, 5, seed=3, objective=objective)
    assert trees_of(booster).base_score[0] != 0  # XGBoost estimated it from the targets; it must be included
    matrix = _inputs(spec, "ttft", booster, seed=5)
    np.testing.assert_array_equal(forest_of(booster).predict(matrix), _xgb(booster, matrix))


def test_values_exactly_at_thresholds_go_right() -> None:
    """x < threshold → left; x == threshold → right (float32 comparison)."""
    x = np.array([[0.0], [1.0], [2.0], [3.0]], dtype=np.float32)
    booster = xgb.train({"max_depth": 1, "eta": 1.0, "base_score": 0.0, "nthread": 1, "min_child_weight": 0},
                        xgb.DMatrix(x, label=np.array([0.0, 0.0, 10.0, 10.0])), 1)
    trees = trees_of(booster)
    cut = trees.thr[np.isfinite(trees.thr)][0]
    probe = np.array([[cut], [np.nextafter(cut, np.float32(-1))], [np.nextafter(cut, np.float32(9))]],
                     dtype=np.float32)
    out = fold(trees).predict(probe)
    np.testing.assert_array_equal(out, _xgb(booster, probe))
    assert out[0, 0] == out[2, 0] != out[1, 0]


def test_constant_target_single_leaf_trees() -> None:
    x = np.random.default_rng(0).random((50, 3)).astype(np.float32)
    booster = xgb.train({"max_depth": 3, "nthread": 1, "base_score": 0.0}, xgb.DMatrix(x, label=np.full(50, 7.0)),
                        3)
    trees = trees_of(booster)
    assert trees.depth == 0 and len(set(trees.leaf.ravel().tolist())) == 3
    np.testing.assert_array_equal(fold(trees).predict(x), _xgb(booster, x))


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
            trees_of(booster)
        with pytest.raises(Unsupported):
            compile_trees(model_document("m.ubj", bytes(booster.save_raw("ubj"))))


def _multi_quantile(x: np.ndarray, y: np.ndarray, trees: int, depth: int,
                    base: np.ndarray | None = None) -> xgb.Booster:
    data = xgb.QuantileDMatrix(x, y, base_margin=base)
    return xgb.train({"objective": "reg:quantileerror", "quantile_alpha": np.array([0.5, 0.9, 0.99]),
                      "max_depth": depth, "tree_method": "hist", "nthread": 1, "base_score": 0.0}, data, trees)


@pytest.mark.parametrize(("trees", "depth"), [(0, 3), (1, 1), (20, 4), (60, 6)])
def test_multi_quantile_boosters_are_bit_equal_per_output(trees: int, depth: int) -> None:
    """One booster, one output column per quantile (one output per tree): every column bit-equal."""
    spec = FeatureSpec()
    for i, name in enumerate(MODEL_NAMES):
        x = spec.matrix(name, columns(random_rows(1500, 11 + i)))
        y = np.asarray(x[:, 2], dtype=np.float64) * 0.05 + np.random.default_rng(i).gamma(2.0, 5.0, len(x))
        booster = _multi_quantile(x, y, trees, depth)
        compiled = trees_of(booster)
        assert compiled.n_outputs == 3 and compiled.n_trees == 3 * trees
        matrix = np.vstack([x[:200], probe_matrix(compiled, rows=200, seed=i)]) if trees else x[:200]
        np.testing.assert_array_equal(fold(compiled).predict(matrix), _xgb(booster, matrix))


@pytest.mark.parametrize(("loc_depth", "q_depth", "rounds"),
                         [(6, 6, 40), (3, 6, 25), (6, 2, 25), (6, 3, 30), (4, 4, 0), (3, 3, 30), (2, 3, 20)])
def test_location_and_quantile_boosters_fold_into_one_forest(loc_depth: int, q_depth: int, rounds: int) -> None:
    """As the trainer publishes a model: a log-space location booster whose output is the multi-quantile booster's
    base margin; one folded forest (also of different depths) equals XGBoost's two calls bit for bit."""
    spec = FeatureSpec()
    x = spec.matrix("ttft", columns(random_rows(2000, 5)))
    y = np.log1p(np.asarray(x[:, 2], dtype=np.float64) * 0.05 + np.random.default_rng(2).gamma(2.0, 5.0, len(x)))
    location = xgb.train({"objective": "reg:squarederror", "max_depth": loc_depth, "nthread": 1}, xgb.DMatrix(x, y),
                         30)
    margin = np.asarray(location.inplace_predict(x), dtype=np.float32)
    booster = _multi_quantile(x, y, rounds, q_depth, np.repeat(margin.reshape(-1, 1), 3, axis=1))
    forest = fold(trees_of(booster), trees_of(location))
    # a location deeper than the quantile trees is evaluated apart (the shallow trees keep their own depth)
    assert isinstance(forest, Chained) == (trees_of(location).depth > trees_of(booster).depth >= 1)
    matrix = np.vstack([x[:300], probe_matrix(trees_of(booster), 300), probe_matrix(trees_of(location), 300, 1)])
    start = np.repeat(np.asarray(location.inplace_predict(matrix), np.float32).reshape(-1, 1), 3, axis=1)
    expected = _xgb(booster, matrix, start)
    np.testing.assert_array_equal(forest.predict(matrix), expected)
    for i in range(0, len(matrix), 97):  # one row at a time: the same sums (no pairwise shortcut)
        np.testing.assert_array_equal(forest.predict(matrix[i:i + 1]), expected[i:i + 1])
    main, loc = decode(publish("ttft", booster, location))  # the array form: proven, then the same trees
    _same_trees(main, trees_of(booster))
    assert loc is not None
    _same_trees(loc, trees_of(location))


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_shallow_forests_use_masks_and_equal_the_walk(depth: int) -> None:
    """Depth ≤ MASK_DEPTH: the masks evaluator (no walk) gives the walk's numbers, for 1, 2 and many rows."""
    spec = FeatureSpec()
    booster = train_booster(spec, "ttft", 40, depth, seed=depth)
    forest = forest_of(booster)
    assert forest.masks is not None and replace(forest, masks=None).masks is None
    matrix = _inputs(spec, "ttft", booster, seed=depth)
    for rows in (matrix[:1], matrix[:2], matrix):
        np.testing.assert_array_equal(forest.predict(rows), replace(forest, masks=None).predict(rows))
        np.testing.assert_array_equal(forest.predict(rows), _xgb(booster, rows))
    assert forest_of(train_booster(spec, "ttft", 5, 5, seed=1)).masks is None


def test_the_array_form_refuses_what_is_not_one() -> None:
    trees = trees_of(train_booster(FeatureSpec(), "tpot", 5, 3, seed=2))
    good = orjson.loads(encode(trees, None))
    assert decode(encode(trees, None))[1] is None

    def patched(array: str, **changes: object) -> bytes:
        return orjson.dumps(dict(good, main={**good["main"], array: {**good["main"][array], **changes}}))

    cells = int(np.prod(good["main"]["feat"]["shape"]))
    short = patched("leaf", data=base64.b64encode(b"1234").decode())
    wrong_dtype = patched("thr", dtype="<f8")
    big_feature = patched("feat", data=base64.b64encode(bytes([250]) * cells).decode())
    pickled = patched("leaf", dtype="|O")
    for bad in (b"not json", orjson.dumps({"format": "x"}), short, wrong_dtype, big_feature, pickled):
        with pytest.raises(BundleError):
            decode(bad)


def test_large_batches_are_walked_in_chunks_with_the_same_result() -> None:
    spec = FeatureSpec()
    booster = train_booster(spec, "tpot", 10, 4, seed=9)
    matrix = spec.matrix("tpot", columns(random_rows(2500, 4)))
    np.testing.assert_array_equal(forest_of(booster).predict(matrix), _xgb(booster, matrix))
