"""Real tiny bundles for predictor tests: XGBoost models trained in tmp_path, written with shared.bundle."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xgboost as xgb

from shared.bundle import build_manifest, sign, write_bundle
from shared.columns import to_columns
from shared.features import FEATURE_FIELDS, MODEL_NAMES, FeatureSpec, FieldKind, pod_class_code
from shared.predictor_settings import PredictorSettings
from shared.timefmt import rfc3339

POD_TYPES = ("", "prefill", "decode", "both", "encode-prefill", "role-nobody-knows", None)
POD_CLASSES = ("", "a100", "h100", None)
ALL_SPECS = [FeatureSpec(token_in_flight=t, encoder=e) for t in (True, False) for e in (True, False)]


def random_rows(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """Valid PredictionRequest rows covering every field, pod types included (some keys omitted)."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        row: dict[str, Any] = {
            "kv_cache_percentage": float(rng.random()), "input_token_length": int(rng.integers(0, 8000)),
            "num_request_waiting": int(rng.integers(0, 4)) * int(rng.integers(0, 6)),
            "num_request_running": int(rng.integers(0, 40)), "num_tokens_generated": int(rng.integers(0, 2)),
            "prefix_cache_score": float(rng.choice([0.0, 0.25, 0.5, 1.0, rng.random()])),
        }
        optional = {"pod_type": POD_TYPES[int(rng.integers(0, len(POD_TYPES)))],
                    "prefill_tokens_in_flight": int(rng.integers(0, 20000)),
                    "decode_tokens_in_flight": int(rng.integers(0, 5000)),
                    "encoder_input_size": int(rng.integers(0, 500)), "encoder_matched_size": int(rng.integers(0, 300)),
                    "pod_class": POD_CLASSES[int(rng.integers(0, len(POD_CLASSES)))]}
        row.update({k: v for k, v in optional.items() if rng.random() < 0.8})
        rows.append(row)
    return rows


def columns(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    return to_columns(rows, ["body", "requests"])


def _targets(name: str, cols: Mapping[str, np.ndarray], rng: np.random.Generator) -> np.ndarray:
    base = cols["input_token_length"] * (1 - cols["prefix_cache_score"]) * 0.02 + cols["num_request_waiting"] * 15
    if name == "tpot":
        base = 8 + cols["num_request_running"] * 0.4 + cols["decode_tokens_in_flight"] * 0.002
    slow_class = 40.0 * (cols["pod_class"] == pod_class_code("a100"))
    return (base + cols["prefill_tokens_in_flight"] * 0.01 + cols["pod_type"] * 3 + slow_class
            + rng.gamma(2.0, 3.0, len(base)))


def train_booster(spec: FeatureSpec, name: str, trees: int, depth: int, seed: int = 0, rows: int = 600,
                  objective: str = "reg:quantileerror") -> xgb.Booster:
    rng = np.random.default_rng(seed)
    cols = columns(random_rows(rows, seed))
    params = {"objective": objective, "max_depth": depth, "eta": 0.3, "nthread": 1, "seed": seed,
              "tree_method": "hist"}
    if objective == "reg:quantileerror":
        params["quantile_alpha"] = 0.9
    return xgb.train(params, xgb.DMatrix(spec.matrix(name, cols), label=_targets(name, cols, rng)), trees)


@dataclass
class Built:
    path: Path
    version: int
    boosters: dict[str, xgb.Booster]
    manifest: dict[str, Any]
    spec: FeatureSpec
    calibration: dict[str, tuple[float, float]]

    def expected(self, rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
        """XGBoost's own prediction for ``rows`` (inplace_predict on spec.matrix), then calibration."""
        cols = columns(rows)
        out = {}
        for name in MODEL_NAMES:
            raw = np.asarray(self.boosters[name].inplace_predict(self.spec.matrix(name, cols)), dtype=np.float64)
            scale, offset = self.calibration[name]
            out[name] = np.maximum(raw * scale + offset, 0.0)
        return out


def build_bundle(root: Path, version: int, spec: FeatureSpec | None = None, *, trees: int = 4, depth: int = 3,
                 seed: int | None = None, prior: bool = False, key: bytes | None = None,
                 calibration: tuple[float, float] = (1.0, 0.5), meta: Mapping[str, Any] | None = None,
                 manifest_patch: Mapping[str, Any] | None = None,
                 entry_patch: Mapping[str, Any] | None = None) -> Built:
    """Train TTFT + TPOT boosters (``trees`` × depth ``depth``) and publish them as bundle ``version`` (each model
    entry updated with ``entry_patch``, e.g. a ``base`` and ``candidate``)."""
    spec = spec or FeatureSpec()
    seed = version if seed is None else seed
    boosters, files, models, calib = {}, {}, {}, {}
    for i, name in enumerate(MODEL_NAMES):
        booster = train_booster(spec, name, trees, depth, seed * 10 + i)
        boosters[name] = booster
        files[f"{name}.ubj"] = bytes(booster.save_raw("ubj"))
        scale, offset = calibration[0], calibration[1] * (i + 1)
        calib[name] = (scale, offset)
        models[name] = {"file": f"{name}.ubj", "features": list(spec.columns(name)), "quantiles": [0.9],
                        "calibration": {"scale": scale, "offset": offset}, "training_rows": 600, "holdout_rows": 60,
                        "metrics": {"coverage": 0.9}, **(entry_patch or {})}
    all_meta = {"feature_flags": spec.as_dict(), "model_type": "xgboost", "objective_type": "quantile",
                "quantile": 0.9, "prior": prior, **(meta or {})}
    manifest = build_manifest(version, rfc3339(), models, files, all_meta, None)
    manifest.update(manifest_patch or {})
    if key:
        manifest["hmac_sha256"] = sign(manifest, key)
    path = write_bundle(root, manifest, files)
    return Built(path, version, boosters, manifest, spec, calib)


def dir_settings(root: Path, **kw: Any) -> PredictorSettings:
    values: dict[str, Any] = {"bundle_dir": str(root), "model_sync_interval_sec": 60.0, "long_poll": False}
    values.update(kw)
    return PredictorSettings(**values)


@pytest.fixture
def bundle_root(tmp_path: Path) -> Path:
    root = tmp_path / "bundles"
    root.mkdir()
    return root


@pytest.fixture(scope="session")
def shared_built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    """One bundle v1 (default spec, 20 trees depth 4) reused by the read-only API tests."""
    yield build_bundle(tmp_path_factory.mktemp("shared-bundles"), 1, trees=20, depth=4)


def int_fields() -> list[str]:
    return [f.name for f in FEATURE_FIELDS if f.kind is FieldKind.INT]
