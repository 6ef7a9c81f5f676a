"""The one feature schema (contract §2 and §5), shared by trainer and predictor.

Raw request fields arrive as numpy columns (see ``shared.columns``); ``FeatureSpec.matrix``
turns them into the float32 matrix each model reads, computing the derived features
vectorised. Column order and names are wire-visible (importances, tree dumps).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

import numpy as np

FEATURE_SPEC_VERSION = 1


class FieldKind(StrEnum):
    INT = "int"
    FLOAT = "float"
    POD_TYPE = "pod_type"


@dataclass(frozen=True)
class RawField:
    """One request field: its JSON type, default when optional, and valid range."""

    name: str
    kind: FieldKind
    required: bool
    default: float = 0.0
    upper: float | None = None


FEATURE_FIELDS: tuple[RawField, ...] = (
    RawField("kv_cache_percentage", FieldKind.FLOAT, True, upper=1.0),
    RawField("input_token_length", FieldKind.INT, True),
    RawField("num_request_waiting", FieldKind.INT, True),
    RawField("num_request_running", FieldKind.INT, True),
    RawField("num_tokens_generated", FieldKind.INT, True),
    RawField("prefix_cache_score", FieldKind.FLOAT, True, upper=1.0),
    RawField("pod_type", FieldKind.POD_TYPE, False),
    RawField("prefill_tokens_in_flight", FieldKind.INT, False),
    RawField("decode_tokens_in_flight", FieldKind.INT, False),
    RawField("encoder_input_size", FieldKind.INT, False),
    RawField("encoder_matched_size", FieldKind.INT, False),
)
TARGET_FIELDS: tuple[RawField, ...] = (
    RawField("actual_ttft_ms", FieldKind.FLOAT, True),
    RawField("actual_tpot_ms", FieldKind.FLOAT, True),
)
RAW_FEATURE_NAMES: tuple[str, ...] = tuple(f.name for f in FEATURE_FIELDS)

# pod_type → pod_type_cat. Contract §2.1: any string is accepted. "" / null is a monolithic
# pod; llm-d role labels that serve whole requests map to it too; unknown roles → OTHER.
POD_TYPE_OTHER = 3
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
                    "pod_type_cat")
        if model == "tpot":
            return (*head, "num_tokens_generated", "pod_type_cat")
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
