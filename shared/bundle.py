"""The model-bundle format: XGBoost ``save_model`` files + ``manifest.json``. No pickle.

Layout on disk (``root`` is the trainer's bundle directory or a shared volume)::

    root/v000017/manifest.json   version, created_at, feature spec, per-model entry, sha256 per file
    root/v000017/manifest.sha256 sha256 of manifest.json (hex): an in-place edit of the manifest is refused
    root/v000017/ttft.ubj        XGBoost UBJSON (or .json); ttft-location.ubj: its location booster
    root/v000017/ttft-forest.json both boosters' trees in the numpy evaluator's array form (shared.forest_file)
    root/v000017/tpot.ubj, tpot-location.ubj, tpot-forest.json
    root/CURRENT                 "17 <manifest sha256>" — the live version, replaced atomically
                                 (a plain "17", as older builds wrote, is still read)

``write_bundle`` writes into a temp dir, fsyncs, then renames it into place and only then
moves ``CURRENT``. ``verify_bundle`` checks every listed hash (and the HMAC when a key is
given) before anything is returned; a reader never sees a half-written bundle. Without an HMAC
key the manifest itself is protected by its recorded sha256 (``CURRENT`` and the sidecar), and
``shared.model`` bounds-checks its calibration. ``fallback_order`` lists the versions a reader
tries when the live one fails: ``CURRENT`` first, then the others newest first.

This module is the one owner of the artifact format, and needs no XGBoost (the predictor reads bundles with
it). ``Manifest`` / ``ModelEntry`` are the typed manifest every reader uses (``parse_manifest_model`` accepts
every older shape: a key an older trainer did not write reads as its default; ``manifest_json`` writes back
exactly the keys that were given, so a manifest re-published unchanged keeps its JSON). ``encode_model`` turns a
fitted booster into its file bytes (UBJSON + the array form) and manifest entry, ``assemble`` builds (and signs)
a manifest around a set of models, ``parse_manifest`` / ``manifest_files`` read the raw JSON, ``base_score``
reads XGBoost's intercept. Trainer, replay, predictor and benchmarks all go through these.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from shared.errors import BundleError
from shared.features import FEATURE_SPEC_VERSION
from shared.forest_file import SUFFIX as FOREST_SUFFIX
from shared.forest_file import publish as publish_forest

if TYPE_CHECKING:
    import xgboost as xgb

BUNDLE_FORMAT = "latency-bundle"
BUNDLE_FORMAT_VERSION = 2
"""2: model entries may carry a physical ``base`` (``shared.base``) the trees are a residual on. A reader of format 1
would ignore it and serve the residual alone, so those readers refuse format 2; this one reads both."""
READABLE_FORMAT_VERSIONS = (1, 2)
MANIFEST = "manifest.json"
MANIFEST_SHA = "manifest.sha256"
CURRENT = "CURRENT"
VERSION_DIR = re.compile(r"^v(\d{6,})$")
ALLOWED_SUFFIXES = (".ubj", ".json")
MODEL_SUFFIX = ".ubj"


class _Wire(BaseModel):
    """A JSON object of the manifest: strict JSON types, immutable, unknown keys kept (and written back)."""

    model_config = ConfigDict(strict=True, frozen=True, extra="allow", allow_inf_nan=False)

    def written(self, *names: str) -> dict[str, Any]:
        """This object as JSON: the keys given (parsed or passed), unknown ones kept; with ``names`` only those
        (absent ones left out), for status pages that echo them."""
        return self.model_dump(include=set(names) if names else None, exclude_unset=True)


class Calibration(_Wire):
    """``max(0, value × scale + offset)`` of one quantile (bounds are checked by ``shared.model``)."""

    scale: float = 1.0
    offset: float = 0.0


class FeatureFlags(_Wire):
    token_in_flight: bool = True
    encoder: bool = True


class FileMeta(_Wire):
    sha256: str
    size: int


class BaseEntry(_Wire):
    """``models.<name>.base``: the physical base (``shared.base.Base``; terms and coefficients checked at load)."""

    terms: tuple[str, ...]
    coefficients: tuple[float, ...]
    rows: int = 0
    source: str = ""
    window: dict[str, float] | None = None
    """Window mode: per load column the window's largest value (the trees learnt the whole latency inside it)."""


class ModelEntry(_Wire):
    """``models.<name>`` (docs/internal-contracts.md, "The model bundle"). Defaults stand for keys older
    trainers did not write; the prior's entry has no fit statistics (candidate, rounds, …)."""

    quantiles: tuple[float, ...] = ()
    """Output columns, ascending; empty: an older single-quantile entry serving ``Manifest.quantile``."""
    primary_quantile: float | None = None
    """The quantile answering ``ttft_ms`` / ``tpot_ms``; None: ``Manifest.quantile``."""
    objective: str | None = None
    target_transform: str = "identity"
    calibration: Calibration | None = None
    """The primary quantile's (the only one an older single-quantile entry has)."""
    calibrations: dict[str, Calibration] | None = None
    """Per quantile, keyed by ``shared.model.quantile_key``."""
    candidate: str = ""
    selection_log_rmse: dict[str, float] = {}
    """Older trainers' candidate scores (log-RMSE); ``selection`` now."""
    selection: dict[str, float] = {}
    """Every candidate's score on the newest rows (lower won), by ``selection_metric``."""
    selection_metric: str = ""
    location_rounds: int = 0
    quantile_rounds: int = 0
    training_rows: int = 0
    fit_rows: int = 0
    stop_rows: int = 0
    holdout_rows: int = 0
    importances: dict[str, float] = {}
    prior: bool = False
    fit_seconds: float = 0.0
    fit_cpu_seconds: float = 0.0
    location_seconds: float = 0.0
    location_fit_rows: int = 0
    calibration_level: float | None = None
    metrics: dict[str, float] = {}
    reference_metrics: dict[str, float] | None = None
    prior_formula: str | None = None
    file: str
    features: tuple[str, ...] = ()
    base_score: float | None = None
    location_file: str | None = None
    """A booster whose single output is ``file``'s base margin for every column."""
    forest_file: str | None = None
    """Both boosters' trees in the numpy evaluator's array form (``shared.forest_file``); None: written before it."""
    base: BaseEntry | None = None
    """The physical base the boosters are a residual on (format 2); None: the boosters alone (format 1 entries)."""

    @property
    def files(self) -> tuple[str, ...]:
        """Every bundle file of this model: its booster, location booster and array form (those it has)."""
        return tuple(f for f in (self.file, self.location_file, self.forest_file) if f)


class Manifest(_Wire):
    """``manifest.json``: header, what the models were built for, the entries and every file's hash."""

    format: str = BUNDLE_FORMAT
    format_version: int = BUNDLE_FORMAT_VERSION
    version: int
    created_at: str | None = None
    feature_spec_version: int = FEATURE_SPEC_VERSION
    feature_flags: FeatureFlags = FeatureFlags()
    model_type: str | None = None
    objective_type: str | None = None
    quantile: float | None = None
    """The primary quantile (``LATENCY_QUANTILE_ALPHA``); None in bundles written without it."""
    quantiles: tuple[float, ...] = ()
    prior: bool = False
    models: dict[str, ModelEntry]
    files: dict[str, FileMeta]
    hmac_sha256: str | None = None

    def meta(self) -> dict[str, Any]:
        """What the models were built for, as written (``assemble``'s ``meta``): to re-publish them."""
        return self.written("feature_flags", "model_type", "objective_type", "quantile", "quantiles", "prior")


ModelFiles = Mapping[str, tuple[Mapping[str, bytes], ModelEntry]]
"""model name → ({file name: bytes}, manifest entry)."""


def _parse(model: type[_Wire], data: bytes, what: str) -> Any:
    try:
        return model.model_validate_json(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise BundleError(f"{what} {where}: {first['msg']} (got {first.get('input')!r})") from None


def parse_manifest_model(manifest: Mapping[str, Any] | bytes) -> Manifest:
    """The typed manifest of a JSON object (or its bytes); ``BundleError`` naming the first bad key."""
    data = manifest if isinstance(manifest, bytes) else orjson.dumps(manifest)
    parsed: Manifest = _parse(Manifest, data, "manifest")
    return parsed


def parse_entry(entry: Mapping[str, Any]) -> ModelEntry:
    parsed: ModelEntry = _parse(ModelEntry, orjson.dumps(entry), "manifest entry")
    return parsed


def manifest_json(manifest: Manifest) -> dict[str, Any]:
    """The manifest as the JSON object it was given as: the keys set, in the trainer's order, unknown keys kept."""
    return manifest.written()


@dataclass(frozen=True)
class Bundle:
    """A verified bundle: its manifest and the exact bytes of every model file."""

    manifest: Manifest
    files: Mapping[str, bytes] = field(default_factory=dict)
    manifest_bytes: bytes = b""

    @property
    def version(self) -> int:
        return self.manifest.version

    def model_entry(self, name: str) -> ModelEntry:
        return self.manifest.models[name]

    def model_bytes(self, name: str) -> bytes:
        return self.files[self.model_entry(name).file]

    def model_files(self, name: str) -> dict[str, bytes]:
        """Every file of model ``name`` (``ModelEntry.files``)."""
        return {n: self.files[n] for n in self.model_entry(name).files}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _canonical(manifest: Mapping[str, Any]) -> bytes:
    body = {k: v for k, v in manifest.items() if k != "hmac_sha256"}
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def sign(manifest: Mapping[str, Any], key: bytes) -> str:
    return hmac.new(key, _canonical(manifest), hashlib.sha256).hexdigest()


def version_dir(root: Path, version: int) -> Path:
    return root / f"v{version:06d}"


def _entry_object(entry: ModelEntry | Mapping[str, Any]) -> dict[str, Any]:
    return entry.written() if isinstance(entry, ModelEntry) else dict(entry)


def build_manifest(version: int, created_at: str, models: Mapping[str, ModelEntry | Mapping[str, Any]],
                   files: Mapping[str, bytes], meta: Mapping[str, Any], key: bytes | None) -> dict[str, Any]:
    """The manifest JSON object for ``files`` (signed with ``key``), not validated: ``assemble`` types it; tests
    use this to write hand-made or deliberately broken manifests."""
    manifest: dict[str, Any] = {
        "format": BUNDLE_FORMAT, "format_version": BUNDLE_FORMAT_VERSION, "version": version,
        "created_at": created_at, "feature_spec_version": FEATURE_SPEC_VERSION, **meta,
        "models": {name: _entry_object(entry) for name, entry in models.items()},
        "files": {name: {"sha256": sha256(data), "size": len(data)} for name, data in files.items()},
    }
    if key:
        manifest["hmac_sha256"] = sign(manifest, key)
    return manifest


def base_score(booster: xgb.Booster) -> list[float]:
    """XGBoost's intercept(s) (``learner_model_param.base_score``: ``"1.35E2"`` or ``"[1.35E2,...]"``)."""
    text = orjson.loads(booster.save_config())["learner"]["learner_model_param"]["base_score"]
    return parse_base_score(text)


def parse_base_score(text: Any) -> list[float]:
    return [float(v) for v in str(text).strip("[]").split(",") if v.strip()]


def encode_model(booster: xgb.Booster, name: str, features: Sequence[str], entry: Mapping[str, Any],
                 location: xgb.Booster | None = None) -> tuple[dict[str, bytes], ModelEntry]:
    """A fitted model as bundle files plus its manifest entry: ``entry`` (the entry's other keys, as ``ModelEntry``
    names them) extended with ``file`` (UBJSON), ``features`` and ``base_score`` (the intercept the tree dump
    lacks); with ``location``, also ``location_file`` — a booster whose output is the main booster's base margin;
    and ``forest_file``: both boosters' trees in the predictor's array form, proven bit-equal to XGBoost
    (``shared.forest_file.publish``; a booster the numpy evaluator cannot serve raises ``BundleError``)."""
    out = {**entry, "file": f"{name}{MODEL_SUFFIX}", "features": list(features),
           "base_score": base_score(location or booster)[0]}
    files = {out["file"]: bytes(booster.save_raw("ubj"))}
    if location is not None:
        out["location_file"] = f"{name}-location{MODEL_SUFFIX}"
        files[out["location_file"]] = bytes(location.save_raw("ubj"))
    out["forest_file"] = f"{name}{FOREST_SUFFIX}"
    files[out["forest_file"]] = publish_forest(name, booster, location)
    return files, parse_entry(out)


def assemble(version: int, created_at: str, models: ModelFiles, meta: Mapping[str, Any],
             key: bytes | None) -> tuple[Manifest, dict[str, bytes]]:
    """(manifest, files) of a bundle holding ``models``; signed when ``key`` is given."""
    files = {file: data for parts, _ in models.values() for file, data in parts.items()}
    entries = {name: entry for name, (_, entry) in models.items()}
    manifest = parse_manifest_model(build_manifest(version, created_at, entries, files, meta, None))
    if key:  # signed as it is written (``manifest_json``), so the signature holds for the bytes on disk
        manifest = manifest.model_copy(update={"hmac_sha256": sign(manifest_json(manifest), key)})
    return manifest, files


def manifest_bytes(manifest: Manifest | Mapping[str, Any]) -> bytes:
    """The bytes of ``manifest.json``; a JSON object (``build_manifest``) is written as given."""
    body = manifest_json(manifest) if isinstance(manifest, Manifest) else manifest
    return orjson.dumps(body, option=orjson.OPT_INDENT_2)


def in_memory(manifest: Manifest | Mapping[str, Any], files: Mapping[str, bytes], key: bytes | None = None) -> Bundle:
    """A verified ``Bundle`` that never touches the disk (e.g. the replay's in-process models)."""
    return verify_bundle(manifest_bytes(manifest), lambda name: files[name], key)


def _fsync_write(path: Path, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bundle(root: Path, manifest: Manifest | Mapping[str, Any], files: Mapping[str, bytes]) -> Path:
    """Write a bundle atomically (temp dir → fsync → rename) and point ``CURRENT`` at it."""
    root.mkdir(parents=True, exist_ok=True)
    data = manifest_bytes(manifest)
    version = manifest.version if isinstance(manifest, Manifest) else int(manifest["version"])
    target = version_dir(root, version)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    for name, blob in files.items():
        _fsync_write(tmp / name, blob)
    _fsync_write(tmp / MANIFEST, data)
    _fsync_write(tmp / MANIFEST_SHA, sha256(data).encode())
    fsync_dir(tmp)
    os.rename(tmp, target)
    set_current(root, version, sha256(data))
    return target


def set_current(root: Path, version: int, manifest_sha: str | None = None) -> None:
    tmp = root / f".{CURRENT}.tmp"
    _fsync_write(tmp, f"{version} {manifest_sha}".encode() if manifest_sha else str(version).encode())
    os.replace(tmp, root / CURRENT)
    fsync_dir(root)


def current_pointer(root: Path) -> tuple[int, str | None] | None:
    """(version, manifest sha256 or None for the old plain form) from ``CURRENT``; None when absent/garbled."""
    try:
        parts = (root / CURRENT).read_text().split()
        return (int(parts[0]), parts[1] if len(parts) > 1 else None) if 0 < len(parts) <= 2 else None
    except (FileNotFoundError, ValueError, UnicodeDecodeError):
        return None


def current_version(root: Path) -> int | None:
    pointer = current_pointer(root)
    return None if pointer is None else pointer[0]


def versions_on_disk(root: Path) -> list[int]:
    """Every ``vNNNNNN`` directory under ``root``, newest first."""
    try:
        found = (VERSION_DIR.match(p.name) for p in root.iterdir() if p.is_dir())
        return sorted((int(m.group(1)) for m in found if m), reverse=True)
    except FileNotFoundError:
        return []


def fallback_order(root: Path) -> list[int]:
    """Versions to try when loading from ``root``: the live one (``CURRENT``) first, then the rest newest first."""
    live = current_version(root)
    others = [v for v in versions_on_disk(root) if v != live]
    return others if live is None else [live, *others]


def _check_header(manifest: Any) -> None:
    if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
        raise BundleError("not a latency bundle manifest")
    if manifest.get("format_version") not in READABLE_FORMAT_VERSIONS:
        raise BundleError(f"unsupported bundle format_version {manifest.get('format_version')!r}")
    if manifest.get("feature_spec_version") != FEATURE_SPEC_VERSION:
        raise BundleError(f"bundle feature_spec_version {manifest.get('feature_spec_version')!r} != "
                          f"{FEATURE_SPEC_VERSION} (built for another feature spec: its models read other "
                          "columns; a model trained on this build's spec is needed)")
    if not isinstance(manifest.get("models"), dict) or not isinstance(manifest.get("files"), dict):
        raise BundleError("manifest lacks models/files")


def _check_hmac(manifest: Mapping[str, Any], key: bytes | None) -> None:
    if key is None:
        return
    given = manifest.get("hmac_sha256")
    if not isinstance(given, str) or not hmac.compare_digest(given, sign(manifest, key)):
        raise BundleError("bundle HMAC signature missing or wrong")


def parse_manifest(manifest_bytes: bytes) -> dict[str, Any]:
    """The manifest as a JSON object (not yet verified); ``BundleError`` otherwise."""
    try:
        manifest = orjson.loads(manifest_bytes)
    except orjson.JSONDecodeError as exc:
        raise BundleError(f"manifest is not JSON: {exc}") from None
    if not isinstance(manifest, dict):
        raise BundleError("manifest is not a JSON object")
    return manifest


def manifest_version(manifest_bytes: bytes) -> int | None:
    """The integer ``version`` of a manifest, or None when it is unreadable or has none."""
    try:
        version = parse_manifest(manifest_bytes).get("version")
    except BundleError:
        return None
    return version if isinstance(version, int) and not isinstance(version, bool) else None


def check_file_name(name: str) -> str:
    if "/" in name or name.startswith(".") or not name.endswith(ALLOWED_SUFFIXES):
        raise BundleError(f"file name {name!r} not allowed in a bundle")
    return name


def manifest_files(manifest_bytes: bytes) -> list[str]:
    """The file names a manifest lists (each checked: no paths, no hidden files, model suffixes only)."""
    files = parse_manifest(manifest_bytes).get("files")
    if not isinstance(files, dict):
        raise BundleError("manifest lacks files")
    return [check_file_name(name) for name in files]


def verify_bundle(manifest_bytes: bytes, read_file: Callable[[str], bytes], key: bytes | None) -> Bundle:
    """Parse and verify a manifest and every file it lists; raise ``BundleError`` otherwise."""
    raw = parse_manifest(manifest_bytes)
    _check_header(raw)
    _check_hmac(raw, key)  # over the JSON as written, before anything is re-encoded
    manifest = parse_manifest_model(manifest_bytes)
    files: dict[str, bytes] = {}
    for name, meta in manifest.files.items():
        data = read_file(check_file_name(name))
        if len(data) != meta.size or sha256(data) != meta.sha256:
            raise BundleError(f"{name}: sha256/size mismatch")
        files[name] = data
    for model, entry in manifest.models.items():
        if any(name not in files for name in entry.files):
            raise BundleError(f"model {model!r} names a file not in the bundle")
    return Bundle(manifest, MappingProxyType(files), manifest_bytes)


def check_manifest_sha(manifest_bytes: bytes, expected: str | None, where: str) -> None:
    if expected is not None and not hmac.compare_digest(sha256(manifest_bytes), expected.strip().lower()):
        raise BundleError(f"manifest.json sha256 differs from the one recorded in {where} (edited in place?)")


def read_bundle(path: Path, key: bytes | None, manifest_sha: str | None = None) -> Bundle:
    """Read and verify the bundle in directory ``path``. The manifest must hash to ``manifest_sha`` (from
    ``CURRENT``) and to the sidecar ``manifest.sha256`` when either is known."""
    try:
        manifest_bytes = (path / MANIFEST).read_bytes()
        check_manifest_sha(manifest_bytes, manifest_sha, CURRENT)
        sidecar = path / MANIFEST_SHA
        if sidecar.is_file():
            check_manifest_sha(manifest_bytes, sidecar.read_text(errors="replace"), f"{path.name}/{MANIFEST_SHA}")
        return verify_bundle(manifest_bytes, lambda name: (path / name).read_bytes(), key)
    except FileNotFoundError as exc:
        raise BundleError(f"bundle file missing: {exc.filename}") from None


def read_version(root: Path, version: int, key: bytes | None) -> Bundle:
    """Version ``version`` of ``root``, checked against ``CURRENT``'s manifest sha256 when it is the live one."""
    pointer = current_pointer(root)
    expected = pointer[1] if pointer is not None and pointer[0] == version else None
    return read_bundle(version_dir(root, version), key, expected)


def read_current(root: Path, key: bytes | None) -> Bundle | None:
    version = current_version(root)
    return None if version is None else read_version(root, version, key)
