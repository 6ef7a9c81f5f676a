"""The typed manifest (shared.bundle.Manifest / ModelEntry): today's JSON written back unchanged, older shapes load
with defaults, wrong types refused naming the key, and no module outside shared/bundle.py reads a manifest by key."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import orjson
import pytest
import xgboost as xgb

from shared.bundle import (
    ModelEntry,
    assemble,
    build_manifest,
    in_memory,
    manifest_bytes,
    parse_manifest_model,
    read_bundle,
    write_bundle,
)
from shared.errors import BundleError
from shared.features import MODEL_NAMES, FeatureSpec, smoke_columns
from shared.model import load_bundle

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).with_name("data")
PRODUCT = ("trainer", "predictor", "shared", "router_client", "sim", "demo", "bench")
OWNER = REPO / "shared" / "bundle.py"
MANIFEST_NAMES = re.compile(r"manifest|^model_entry$|^last_entries$")
"""Identifiers (names, attributes) that hold a manifest, an entry or a function returning one; ``.entry`` too."""
SPEC = FeatureSpec()


def _fixture(name: str) -> bytes:
    return (DATA / f"manifest-{name}.json").read_bytes()


def test_a_trained_manifest_is_written_back_byte_for_byte() -> None:
    """``manifest-trained.json`` is what the trainer wrote before the manifest was typed (fit_model + assemble)."""
    raw = _fixture("trained")
    assert manifest_bytes(parse_manifest_model(raw)) == raw


@pytest.mark.parametrize("name", ["prior", "single-quantile"])
def test_other_manifests_are_written_back_as_the_same_json(name: str) -> None:
    """The prior (written by ``trainer/prior.py``) and a single-quantile manifest of an older trainer: the same keys
    and values (the order of an object's keys may differ: JSON objects are unordered)."""
    raw = _fixture(name)
    assert orjson.loads(manifest_bytes(parse_manifest_model(raw))) == orjson.loads(raw)


def test_an_older_single_quantile_manifest_reads_with_defaults() -> None:
    manifest = parse_manifest_model(_fixture("single-quantile"))
    entry = manifest.models["ttft"]
    assert "quantiles" not in orjson.loads(_fixture("single-quantile"))  # top level: older trainers did not write it
    assert manifest.quantiles == () and manifest.quantile == 0.9 and manifest.prior is False
    assert entry.quantiles == (0.9,) and entry.primary_quantile is None and entry.calibrations is None
    assert entry.target_transform == "identity" and entry.location_file is None and entry.candidate == ""
    assert entry.location_rounds == 0 and entry.selection_log_rmse == {} and entry.files == ("ttft.ubj",)
    assert entry.calibration is not None and entry.calibration.scale == 1.08


def test_an_older_bundle_loads_and_predicts() -> None:
    """A real bundle in the pre-multi-quantile shape (one output, ``calibration`` only, no ``primary_quantile`` /
    ``target_transform`` / ``calibrations`` / top-level ``quantiles``) still loads and serves its one quantile."""
    old = orjson.loads(_fixture("single-quantile"))
    files, models = {}, {}
    rng = np.random.default_rng(0)
    for name in MODEL_NAMES:
        x = rng.uniform(0, 100, (200, len(SPEC.columns(name)))).astype(np.float32)
        booster = xgb.train({"objective": "reg:quantileerror", "quantile_alpha": 0.9, "max_depth": 3, "nthread": 1},
                            xgb.DMatrix(x, label=x[:, 2] + 10), 5)
        files[f"{name}.ubj"] = bytes(booster.save_raw("ubj"))
        models[name] = old["models"][name]
    meta = {k: old[k] for k in ("feature_flags", "model_type", "objective_type", "quantile", "prior")}
    loaded = load_bundle(in_memory(build_manifest(3, old["created_at"], models, files, meta, None), files), SPEC)
    for name in MODEL_NAMES:
        model = loaded.models[name]
        assert model.quantiles == (0.9,) and model.primary == 0 and model.transform == "identity"
        assert loaded.predict(name, smoke_columns()).shape == (1,)


def test_unknown_keys_are_kept() -> None:
    raw = orjson.loads(_fixture("trained"))
    raw["written_by_a_newer_trainer"] = {"x": 1}
    raw["models"]["ttft"]["new_statistic"] = [1, 2]
    assert orjson.loads(manifest_bytes(parse_manifest_model(raw))) == raw


@pytest.mark.parametrize(("patch", "where"), [
    ({"quantiles": "0.9"}, "models.ttft.quantiles"),
    ({"training_rows": 1.5}, "models.ttft.training_rows"),
    ({"calibration": {"scale": "big"}}, "models.ttft.calibration.scale"),
    ({"prior": 1}, "models.ttft.prior"),
])
def test_a_wrong_type_is_refused_naming_the_key(patch: dict, where: str) -> None:
    raw = orjson.loads(_fixture("trained"))
    raw["models"]["ttft"].update(patch)
    with pytest.raises(BundleError, match=re.escape(where)):
        parse_manifest_model(raw)


def test_assemble_signs_what_it_writes(tmp_path: Path) -> None:
    """A signed bundle of typed entries verifies with the key (the signature covers the bytes on disk)."""
    entry = ModelEntry(file="ttft.ubj", features=SPEC.columns("ttft"), quantiles=(0.9,), training_rows=3)
    manifest, files = assemble(4, "2026-12-01T00:00:00+00:00", {"ttft": ({"ttft.ubj": b"x"}, entry)},
                               {"feature_flags": SPEC.as_dict(), "quantile": 0.9}, b"secret")
    bundle = read_bundle(write_bundle(tmp_path, manifest, files), b"secret")
    assert bundle.model_entry("ttft") == entry and bundle.manifest.hmac_sha256
    assert orjson.loads(bundle.manifest_bytes)["models"]["ttft"] == {
        "quantiles": [0.9], "training_rows": 3, "file": "ttft.ubj", "features": list(SPEC.columns("ttft"))}


def _mentions_manifest(expr: ast.AST) -> bool:
    for node in ast.walk(expr):
        if isinstance(node, ast.Name) and MANIFEST_NAMES.search(node.id):
            return True
        if isinstance(node, ast.Attribute) and (node.attr == "entry" or MANIFEST_NAMES.search(node.attr)):
            return True
    return False


def _string_keyed_reads(path: Path) -> list[str]:
    """``x["key"]`` / ``x.get("key")`` where ``x`` is a manifest (or a name bound from one) in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    bound = {target.id for node in ast.walk(tree) if isinstance(node, (ast.Assign, ast.For, ast.comprehension))
             and _mentions_manifest(node.value if isinstance(node, ast.Assign) else node.iter)
             for target in ast.walk(node.targets[0] if isinstance(node, ast.Assign) else node.target)
             if isinstance(target, ast.Name)}
    bound |= {node.arg for node in ast.walk(tree)  # parameters: def observe(self, name, entry)
              if isinstance(node, ast.arg) and (node.arg == "entry" or MANIFEST_NAMES.search(node.arg))}

    def manifest_like(expr: ast.expr) -> bool:
        return _mentions_manifest(expr) or any(isinstance(n, ast.Name) and n.id in bound for n in ast.walk(expr))

    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(
                node.slice.value, str) and manifest_like(node.value):
            found.append((node.lineno, ast.unparse(node)))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
                and manifest_like(node.func.value)):
            found.append((node.lineno, ast.unparse(node)))
    where = path.relative_to(REPO) if path.is_relative_to(REPO) else path.name
    return [f"{where}:{line}: {text}" for line, text in sorted(found)]


def test_no_module_outside_shared_bundle_reads_a_manifest_by_string_key() -> None:
    files = [p for package in PRODUCT for p in (REPO / package).rglob("*.py") if p != OWNER]
    assert len(files) > 100
    found = [hit for path in files for hit in _string_keyed_reads(path)]
    assert found == [], "read the typed Manifest / ModelEntry (shared/bundle.py) instead:\n" + "\n".join(found)


def test_the_check_sees_the_forms_it_forbids(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text('entry = bundle.model_entry("ttft")\nentry.get("candidate")\nx = live.bundle.manifest["prior"]\n'
                     'for name, e in manifest.models.items():\n    e["file"]\nui = {"a": 1}\nui.get("a")\n'
                     'h = client.get("/bundle/manifest").headers\nh["etag"]\nfitted.entry["candidate"]\n')
    assert [hit.split(": ", 1)[1] for hit in _string_keyed_reads(probe)] == [
        "entry.get('candidate')", "live.bundle.manifest['prior']", "e['file']", "fitted.entry['candidate']"]
