"""The array form of a model's trees in a bundle (``<name>-forest.json``), written at publish time.

A JSON document — so every reader's file-name rule (``.ubj`` / ``.json``) accepts it and older predictors, which
only hash-verify files they do not use, keep working — holding each booster's ``shared.forest.Trees`` arrays as
base64 of their little-endian bytes::

    {"format": "latency-forest", "format_version": 1,
     "main": {"depth": 6, "n_features": 14, "base_score": A, "feat": A, "thr": A, "leaf": A, "output": A},
     "location": {...} | null}          A = {"dtype": "<f4", "shape": [300, 63], "data": "<base64>"}

Reading is ``np.frombuffer`` of a fixed dtype per array (no pickle, nothing executed) plus ``check_trees``. The
trainer writes it (``publish``) only after the folded forest reproduced XGBoost bit for bit on probe rows placed on
and around every threshold, so a predictor serves it without XGBoost. ``from_booster_files`` compiles the same
arrays from the ``.ubj`` / ``.json`` booster files (bundles written before the array form), also without XGBoost.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from shared import ubjson
from shared.errors import BundleError
from shared.forest import Trees, Unsupported, check_trees, compile_trees, fold, probe_matrix

if TYPE_CHECKING:
    import xgboost as xgb

FORMAT = "latency-forest"
FORMAT_VERSION = 1
SUFFIX = "-forest.json"
DTYPES = {"base_score": "<f4", "feat": "|u1", "thr": "<f4", "leaf": "<f4", "output": "<i4"}


def _array(values: np.ndarray, dtype: str) -> dict[str, Any]:
    data = np.ascontiguousarray(values, dtype=np.dtype(dtype))
    return {"dtype": dtype, "shape": list(data.shape), "data": base64.b64encode(data.tobytes()).decode("ascii")}


def _booster(trees: Trees) -> dict[str, Any]:
    return {"depth": trees.depth, "n_features": trees.n_features,
            **{name: _array(getattr(trees, name), dtype) for name, dtype in DTYPES.items()}}


def encode(main: Trees, location: Trees | None) -> bytes:
    return orjson.dumps({"format": FORMAT, "format_version": FORMAT_VERSION, "main": _booster(main),
                         "location": None if location is None else _booster(location)})


def _read_array(doc: Any, dtype: str) -> np.ndarray:
    if not isinstance(doc, dict) or doc.get("dtype") != dtype or not isinstance(doc.get("shape"), list):
        raise BundleError(f"forest array is not {{dtype: {dtype!r}, shape, data}}")
    shape = tuple(int(v) for v in doc["shape"])
    data = base64.b64decode(str(doc.get("data", "")), validate=True)
    array = np.frombuffer(data, dtype=np.dtype(dtype))
    if any(v < 0 for v in shape) or array.size != int(np.prod(shape)):
        raise BundleError(f"forest array of shape {list(shape)} holds {array.size} values")
    return array.reshape(shape).astype(np.dtype(dtype).newbyteorder("="))


def _read_booster(doc: Any) -> Trees:
    if not isinstance(doc, dict) or not isinstance(doc.get("depth"), int) or not isinstance(doc.get("n_features"), int):
        raise BundleError("forest booster lacks depth / n_features")
    arrays = {name: _read_array(doc.get(name), dtype) for name, dtype in DTYPES.items()}
    return check_trees(Trees(doc["depth"], doc["n_features"], **arrays))


def decode(data: bytes) -> tuple[Trees, Trees | None]:
    """(main, location) trees of an array-form file; ``BundleError`` when it is not one or is inconsistent."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise BundleError(f"forest file is not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("format_version") != FORMAT_VERSION:
        raise BundleError(f"not a {FORMAT} v{FORMAT_VERSION} file")
    try:
        return _read_booster(doc.get("main")), None if doc.get("location") is None else _read_booster(doc["location"])
    except (ValueError, TypeError) as exc:
        raise BundleError(f"forest file: {exc}") from None


def model_document(file_name: str, data: bytes) -> Mapping[str, Any]:
    """An XGBoost model file (``save_model`` UBJSON or JSON) as its JSON document, read without XGBoost."""
    try:
        doc = ubjson.loads(data) if file_name.endswith(".ubj") else orjson.loads(data)
    except (ValueError, orjson.JSONDecodeError) as exc:
        raise BundleError(f"{file_name}: not an XGBoost model file: {exc}") from None
    if not isinstance(doc, dict):
        raise BundleError(f"{file_name}: not an XGBoost model file")
    return doc


def from_booster_files(files: Mapping[str, bytes], main: str, location: str | None) -> tuple[Trees, Trees | None]:
    """(main, location) trees compiled from the booster files ``main`` / ``location`` of ``files``."""
    trees = compile_trees(model_document(main, files[main]))
    return trees, None if location is None else compile_trees(model_document(location, files[location]))


def _xgboost_raw(booster: xgb.Booster, location: xgb.Booster | None, x: np.ndarray, k: int) -> np.ndarray:
    base = None
    if location is not None:
        start = np.asarray(location.inplace_predict(x, validate_features=False), dtype=np.float32)
        base = np.repeat(start.reshape(-1, 1), k, axis=1)
    out = booster.inplace_predict(x, validate_features=False, base_margin=base)
    return np.asarray(out, dtype=np.float32).reshape(len(x), k)


def publish(name: str, booster: xgb.Booster, location: xgb.Booster | None = None) -> bytes:
    """The array-form file of a fitted model, after proving its folded forest bit-equal to XGBoost on probe rows
    around every threshold; ``Unsupported`` / ``BundleError`` when the numpy evaluator cannot serve it."""
    main = compile_trees(orjson.loads(bytes(booster.save_raw("json"))))
    loc = None if location is None else compile_trees(orjson.loads(bytes(location.save_raw("json"))))
    forest = fold(main, loc)
    probe = np.vstack([probe_matrix(main), *([probe_matrix(loc, seed=1)] if loc is not None else [])])
    if not np.array_equal(forest.predict(probe), _xgboost_raw(booster, location, probe, main.n_outputs)):
        raise Unsupported(f"{name}: the numpy forest differs from XGBoost on the probe rows")
    return encode(main, loc)
