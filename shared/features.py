"""The one feature schema (contract §2 and §5), shared by trainer and predictor.

Raw request fields arrive as numpy columns (see ``shared.columns``); ``FeatureSpec.matrix``
turns them into the float32 matrix each model reads, computing the derived features
vectorised. Column order and names are wire-visible (importances, tree dumps).

Adding a feature = one :class:`RawField` in ``FEATURE_FIELDS`` (+ its model column in
``FeatureSpec.columns``, + a ``FEATURE_SPEC_VERSION`` bump) and the code that measures it; the row
builders below, validation, the trainer's log (by column name) and the prior follow.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from types import MappingProxyType

import numpy as np

FEATURE_SPEC_VERSION = 2
"""1: the eleven llm-d fields. 2: + the ``pod_class`` extension (read by both models)."""


POD_TYPE_OTHER = 3
"""``pod_type_cat`` of a pod_type string outside the known roles."""


class FieldKind(StrEnum):
    INT = "int"
    FLOAT = "float"
    LABEL = "label"
    """A string on the wire (null ≡ ""), a number in columns: the field's ``encode`` maps it."""


@dataclass(frozen=True)
class RawField:
    """One request field: its JSON type, default when optional, valid range and typical range.

    ``typical`` is the range a healthy pod shows (the prior's synthetic grid draws from it, and
    smoke rows take its midpoint); ``idle_share`` is the share of grid rows where the value is 0
    (e.g. half the pods have no queue). Neither limits what a client may send.
    """

    name: str
    kind: FieldKind
    required: bool
    default: float = 0.0
    upper: float | None = None
    typical: tuple[float, float] = (0.0, 0.0)
    idle_share: float = 0.0
    encode: Callable[[str | None], int] | None = None
    """LABEL fields: the documented, stateless string → code mapping."""
    extension: bool = False
    """Ours, not in llm-d's wire contract: optional, and echoed back only when the client sent it."""

    @property
    def wire_default(self) -> float | int | str:
        """The default as a client would send it (``""`` for labels)."""
        if self.kind is FieldKind.LABEL:
            return ""
        return int(self.default) if self.kind is FieldKind.INT else float(self.default)


# pod_type → pod_type_cat. Contract §2.1: any string is accepted. "" / null is a monolithic
# pod; llm-d role labels that serve whole requests map to it too; unknown roles → OTHER.
POD_TYPE_CODES: Mapping[str, int] = MappingProxyType(
    {
        "": 0,
        "both": 0,
        "prefill-decode": 0,
        "encode-prefill-decode": 0,
        "prefill": 1,
        "encode-prefill": 1,
        "decode": 2,
    }
)


def pod_type_code(value: str | None) -> int:
    """Documented mapping of a ``pod_type`` string to ``pod_type_cat`` (unknown → 3)."""
    return POD_TYPE_CODES.get(value or "", POD_TYPE_OTHER)


POD_CLASS_MODULUS = 1 << 23
"""Codes stay below 2^23 + 2, so they are exact in the models' float32 matrices."""


@lru_cache(maxsize=4096)
def pod_class_code(value: str | None) -> int:
    """``pod_class`` (GPU type / engine config, e.g. ``"a100-tp1"``) → a number, without any
    vocabulary: ``crc32(UTF-8) mod 2^23 + 1``; ``""`` / null (unknown class) → 0. Trainer,
    predictor, router and replay compute the same code for the same string."""
    if not value:
        return 0
    return zlib.crc32(value.encode("utf-8")) % POD_CLASS_MODULUS + 1


FEATURE_FIELDS: tuple[RawField, ...] = (
    RawField("kv_cache_percentage", FieldKind.FLOAT, True, upper=1.0, typical=(0.0, 1.0)),
    RawField("input_token_length", FieldKind.INT, True, typical=(0, 32_768)),
    RawField("num_request_waiting", FieldKind.INT, True, typical=(0, 64), idle_share=0.5),
    RawField("num_request_running", FieldKind.INT, True, typical=(0, 256)),
    RawField("num_tokens_generated", FieldKind.INT, True),
    RawField("prefix_cache_score", FieldKind.FLOAT, True, upper=1.0, typical=(0.0, 1.0)),
    RawField("pod_type", FieldKind.LABEL, False, typical=(0, POD_TYPE_OTHER + 1), encode=pod_type_code),
    RawField("prefill_tokens_in_flight", FieldKind.INT, False, typical=(0, 65_536)),
    RawField("decode_tokens_in_flight", FieldKind.INT, False, typical=(0, 200_000)),
    RawField("encoder_input_size", FieldKind.INT, False),
    RawField("encoder_matched_size", FieldKind.INT, False),
    RawField("pod_class", FieldKind.LABEL, False, encode=pod_class_code, extension=True),
)
"""The eleven llm-d PredictionRequest fields, then our extensions (``pod_class``)."""
TARGET_FIELDS: tuple[RawField, ...] = (
    RawField("actual_ttft_ms", FieldKind.FLOAT, True),
    RawField("actual_tpot_ms", FieldKind.FLOAT, True),
)
RAW_FEATURE_NAMES: tuple[str, ...] = tuple(f.name for f in FEATURE_FIELDS)
LABEL_FIELDS: tuple[RawField, ...] = tuple(f for f in FEATURE_FIELDS if f.kind is FieldKind.LABEL)


def is_queued(waiting: np.ndarray) -> np.ndarray:
    return (waiting > 0).astype(np.float64)


def effective_input_tokens(input_tokens: np.ndarray, prefix_score: np.ndarray) -> np.ndarray:
    return (1.0 - prefix_score) * input_tokens


def prefill_score_bucket(prefix_score: np.ndarray) -> np.ndarray:
    """[0,.25)→0, [.25,.5)→1, [.5,.75)→2, [.75,1]→3."""
    return np.minimum(np.floor(np.clip(prefix_score, 0.0, 1.0) * 4.0), 3.0)


def queue_bucket(waiting: np.ndarray) -> np.ndarray:
    """Sample bucket over waiting requests: 0 | 1–2 | 3–5 | 6–10 | ≥11 → 0…4."""
    return np.searchsorted(np.array([1, 3, 6, 11]), waiting, side="right")


def cache_bucket(kv: np.ndarray) -> np.ndarray:
    return np.minimum(np.floor(np.clip(kv, 0.0, 1.0) * 20.0), 19).astype(np.int64)


def prefix_bucket(prefix_score: np.ndarray) -> np.ndarray:
    return prefill_score_bucket(prefix_score).astype(np.int64)


Columns = Mapping[str, np.ndarray]

_DERIVED = {
    "is_queued": lambda c: is_queued(c["num_request_waiting"]),
    "effective_input_tokens": lambda c: effective_input_tokens(
        c["input_token_length"], c["prefix_cache_score"]
    ),
    "prefill_score_bucket": lambda c: prefill_score_bucket(c["prefix_cache_score"]),
    "pod_type_cat": lambda c: c["pod_type"],
}


@dataclass(frozen=True)
class FeatureSpec:
    """Which columns each model reads, from the two LATENCY_* feature flags (contract §5)."""

    token_in_flight: bool = True
    encoder: bool = True

    @property
    def version(self) -> int:
        return FEATURE_SPEC_VERSION

    def columns(self, model: str) -> tuple[str, ...]:
        head = ["is_queued", "kv_cache_percentage", "input_token_length", "num_request_waiting",
                "num_request_running"]
        if self.token_in_flight:
            head += ["prefill_tokens_in_flight", "decode_tokens_in_flight"]
        if model == "ttft":
            if self.encoder:
                head += ["encoder_matched_size", "encoder_input_size"]
            return (*head, "prefix_cache_score", "effective_input_tokens", "prefill_score_bucket",
                    "pod_type_cat", "pod_class")
        if model == "tpot":
            return (*head, "num_tokens_generated", "pod_type_cat", "pod_class")
        raise KeyError(f"unknown model {model!r}")

    def matrix(self, model: str, cols: Columns) -> np.ndarray:
        """Build the float32 (n, k) matrix of ``model`` from raw columns, vectorised."""
        names = self.columns(model)
        n = len(cols["input_token_length"])
        out = np.empty((n, len(names)), dtype=np.float32)
        for j, name in enumerate(names):
            derive = _DERIVED.get(name)
            out[:, j] = derive(cols) if derive else cols[name]
        return out

    def as_dict(self) -> dict[str, bool]:
        return {"token_in_flight": self.token_in_flight, "encoder": self.encoder}


MODEL_NAMES: tuple[str, ...] = ("ttft", "tpot")
TARGET_OF: Mapping[str, str] = MappingProxyType({"ttft": "actual_ttft_ms", "tpot": "actual_tpot_ms"})


# -- row and column builders: every producer of feature rows goes through these, so a new field
# -- is added here once and every builder (router, replay, prior, smoke rows) carries it.

FeatureRow = dict[str, float | int | str]


_WIRE_DEFAULTS: Mapping[str, float | int | str] = MappingProxyType({f.name: f.wire_default for f in FEATURE_FIELDS})
_REQUIRED_NAMES: tuple[str, ...] = tuple(f.name for f in FEATURE_FIELDS if f.required)


def feature_row(values: Mapping[str, float | int | str]) -> FeatureRow:
    """A PredictionRequest row (wire form, fields in spec order) from measured ``values``; absent optional fields
    get their default. A missing required field or an unknown name is a caller bug: ``KeyError``. (On the
    router's hot path: one row per candidate pod per decision, so defaults are copied, not rebuilt.)"""
    if not _WIRE_DEFAULTS.keys() >= values.keys():
        raise KeyError(f"unknown feature fields {sorted(set(values) - set(RAW_FEATURE_NAMES))}")
    for name in _REQUIRED_NAMES:
        if name not in values:
            raise KeyError(f"required feature field {name!r} missing")
    row: FeatureRow = dict(_WIRE_DEFAULTS)
    row.update(values)
    return row


def feature_columns(values: Mapping[str, np.ndarray | float], n: int) -> dict[str, np.ndarray]:
    """Raw float64 columns (labels as their codes) for ``n`` rows: arrays are taken as they are,
    scalars broadcast, absent optional fields default. Same rules as :func:`feature_row`."""
    unknown = set(values) - set(RAW_FEATURE_NAMES)
    if unknown:
        raise KeyError(f"unknown feature fields {sorted(unknown)}")
    cols: dict[str, np.ndarray] = {}
    for f in FEATURE_FIELDS:
        if f.name not in values and f.required:
            raise KeyError(f"required feature field {f.name!r} missing")
        value = values.get(f.name, f.default)
        cols[f.name] = np.broadcast_to(np.asarray(value, dtype=np.float64), (n,)).copy()
    return cols


def typical_columns(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``n`` rows drawn over every field's typical range (ints half-open), ``idle_share`` of them 0."""
    cols: dict[str, np.ndarray] = {}
    for f in FEATURE_FIELDS:
        low, high = f.typical
        if low == high:
            cols[f.name] = np.full(n, float(low))
            continue
        idle = rng.random(n) < f.idle_share if f.idle_share else None
        if f.kind is FieldKind.FLOAT:
            drawn = rng.uniform(low, high, n)
        else:
            drawn = rng.integers(int(low), int(high), n).astype(np.float64)
        cols[f.name] = drawn if idle is None else np.where(idle, 0.0, drawn)
    return cols


def smoke_columns() -> dict[str, np.ndarray]:
    """One plausible row (the midpoint of every typical range, whole numbers for ints and codes)."""
    cols: dict[str, np.ndarray] = {}
    for f in FEATURE_FIELDS:
        mid = sum(f.typical) / 2.0
        cols[f.name] = np.array([mid if f.kind is FieldKind.FLOAT else float(int(mid))])
    return cols
