"""Contract §5: every derived feature, bucket edge and column order (shared/features.py)."""

from __future__ import annotations

import numpy as np
import pytest

from shared.features import (
    FeatureSpec,
    cache_bucket,
    effective_input_tokens,
    is_queued,
    pod_class_code,
    pod_type_code,
    prefill_score_bucket,
    prefix_bucket,
    queue_bucket,
)


@pytest.mark.parametrize(("waiting", "expected"), [(0, 0), (1, 1), (2, 1), (3, 2), (5, 2), (6, 3), (10, 3),
                                                   (11, 4), (500, 4)])
def test_queue_bucket_edges(waiting: int, expected: int) -> None:
    assert queue_bucket(np.array([waiting]))[0] == expected


@pytest.mark.parametrize(("kv", "expected"), [(0.0, 0), (0.0499, 0), (0.05, 1), (0.5, 10), (0.9499, 18),
                                              (0.95, 19), (1.0, 19), (-0.1, 0), (1.5, 19)])
def test_cache_bucket_edges(kv: float, expected: int) -> None:
    assert cache_bucket(np.array([kv]))[0] == expected


@pytest.mark.parametrize(("score", "expected"), [(0.0, 0), (0.2499, 0), (0.25, 1), (0.4999, 1), (0.5, 2),
                                                 (0.7499, 2), (0.75, 3), (1.0, 3), (-1.0, 0), (2.0, 3)])
def test_prefix_and_prefill_score_bucket_edges(score: float, expected: int) -> None:
    assert prefix_bucket(np.array([score]))[0] == expected
    assert prefill_score_bucket(np.array([score]))[0] == expected


@pytest.mark.parametrize(("waiting", "expected"), [(0, 0.0), (1, 1.0), (37, 1.0)])
def test_is_queued(waiting: int, expected: float) -> None:
    assert is_queued(np.array([waiting]))[0] == expected


@pytest.mark.parametrize(("tokens", "score", "expected"), [(1000, 0.0, 1000.0), (1000, 0.25, 750.0),
                                                           (1000, 1.0, 0.0), (0, 0.5, 0.0)])
def test_effective_input_tokens(tokens: int, score: float, expected: float) -> None:
    assert effective_input_tokens(np.array([tokens]), np.array([score]))[0] == pytest.approx(expected)


@pytest.mark.parametrize(("pod_type", "code"), [(None, 0), ("", 0), ("both", 0), ("prefill-decode", 0),
                                                ("encode-prefill-decode", 0), ("prefill", 1),
                                                ("encode-prefill", 1), ("decode", 2), ("encode", 3),
                                                ("gpu-xl", 3)])
def test_pod_type_codes(pod_type: str | None, code: int) -> None:
    assert pod_type_code(pod_type) == code


TTFT_13 = ("is_queued", "kv_cache_percentage", "input_token_length", "num_request_waiting", "num_request_running",
           "prefill_tokens_in_flight", "decode_tokens_in_flight", "encoder_matched_size", "encoder_input_size",
           "prefix_cache_score", "effective_input_tokens", "prefill_score_bucket", "pod_type_cat")
TPOT_9 = ("is_queued", "kv_cache_percentage", "input_token_length", "num_request_waiting", "num_request_running",
          "prefill_tokens_in_flight", "decode_tokens_in_flight", "num_tokens_generated", "pod_type_cat")
TTFT_14 = (*TTFT_13, "pod_class")
"""Contract §5's thirteen TTFT columns, then our ``pod_class`` extension (last, so the contract's order holds)."""
TPOT_10 = (*TPOT_9, "pod_class")


@pytest.mark.parametrize(("tif", "enc", "ttft_n", "tpot_n"), [(True, True, 14, 10), (False, True, 12, 8),
                                                              (True, False, 12, 10), (False, False, 10, 8)])
def test_column_counts_by_flags(tif: bool, enc: bool, ttft_n: int, tpot_n: int) -> None:
    spec = FeatureSpec(token_in_flight=tif, encoder=enc)
    assert len(spec.columns("ttft")) == ttft_n
    assert len(spec.columns("tpot")) == tpot_n


def test_column_order_matches_contract() -> None:
    spec = FeatureSpec()
    assert spec.columns("ttft") == TTFT_14
    assert spec.columns("tpot") == TPOT_10


def test_matrix_values_follow_the_derivations() -> None:
    cols = {"kv_cache_percentage": np.array([0.42]), "input_token_length": np.array([812.0]),
            "num_request_waiting": np.array([3.0]), "num_request_running": np.array([5.0]),
            "num_tokens_generated": np.array([1.0]), "prefix_cache_score": np.array([0.25]),
            "pod_type": np.array([2.0]), "prefill_tokens_in_flight": np.array([1536.0]),
            "decode_tokens_in_flight": np.array([7.0]), "encoder_input_size": np.array([11.0]),
            "encoder_matched_size": np.array([4.0]), "pod_class": np.array([float(pod_class_code("h100"))])}
    row = dict(zip(TTFT_14, FeatureSpec().matrix("ttft", cols)[0], strict=True))
    assert row == pytest.approx({"is_queued": 1, "kv_cache_percentage": 0.42, "input_token_length": 812,
                                 "num_request_waiting": 3, "num_request_running": 5, "prefill_tokens_in_flight": 1536,
                                 "decode_tokens_in_flight": 7, "encoder_matched_size": 4, "encoder_input_size": 11,
                                 "prefix_cache_score": 0.25, "effective_input_tokens": 609, "prefill_score_bucket": 1,
                                 "pod_type_cat": 2, "pod_class": pod_class_code("h100")})
    tpot = dict(zip(TPOT_10, FeatureSpec().matrix("tpot", cols)[0], strict=True))
    assert tpot["num_tokens_generated"] == 1 and tpot["pod_type_cat"] == 2 and tpot["is_queued"] == 1
    assert tpot["pod_class"] == pod_class_code("h100")


def test_feature_row_fills_optional_defaults_and_names_bad_keys() -> None:
    from shared.features import FEATURE_FIELDS, feature_row
    required = {f.name: 1 for f in FEATURE_FIELDS if f.required}
    row = feature_row(required)
    assert list(row) == [f.name for f in FEATURE_FIELDS]
    assert row["pod_type"] == "" and row["pod_class"] == "" and row["prefill_tokens_in_flight"] == 0
    with pytest.raises(KeyError, match="prefill_token_in_flight"):
        feature_row({**required, "prefill_token_in_flight": 3})
    with pytest.raises(KeyError, match="input_token_length"):
        feature_row({k: v for k, v in required.items() if k != "input_token_length"})


def test_feature_columns_broadcast_scalars_and_default_the_rest() -> None:
    from shared.features import FEATURE_FIELDS, feature_columns
    values = {f.name: 2.0 for f in FEATURE_FIELDS if f.required}
    values["num_request_running"] = np.array([1.0, 2.0, 3.0])
    cols = feature_columns(values, 3)
    assert set(cols) == {f.name for f in FEATURE_FIELDS}
    np.testing.assert_array_equal(cols["input_token_length"], [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(cols["encoder_input_size"], [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(cols["num_request_running"], [1.0, 2.0, 3.0])


def test_smoke_and_typical_rows_cover_every_field() -> None:
    from shared.features import FEATURE_FIELDS, smoke_columns, typical_columns
    grid = typical_columns(500, np.random.default_rng(0))
    for f in FEATURE_FIELDS:
        low, high = f.typical
        assert grid[f.name].min() >= min(low, 0) and grid[f.name].max() <= high, f.name
        if f.idle_share:
            assert 0.3 < float(np.mean(grid[f.name] == 0)) < 0.7
    assert {k: v.shape for k, v in smoke_columns().items()} == {f.name: (1,) for f in FEATURE_FIELDS}


@pytest.mark.parametrize(("pod_class", "code"), [(None, 0), ("", 0), ("a100", 6866563), ("h100", 6326537),
                                                 ("llama3-8b-h100", 4383526), ("é-gpu", 1664606)])
def test_pod_class_code_is_a_stable_hash(pod_class: str | None, code: int) -> None:
    """crc32(UTF-8) mod 2^23 + 1, "" → 0: pinned values, so a change of the encoding cannot go unnoticed
    (it would silently remap every stored row)."""
    import zlib
    assert pod_class_code(pod_class) == code
    if pod_class:
        assert code == zlib.crc32(pod_class.encode("utf-8")) % (1 << 23) + 1
    assert float(np.float32(code)) == code, "exact in the models' float32 matrices"


def test_pod_class_code_survives_a_new_interpreter() -> None:
    """Python's str hash is salted per process; ours must not be."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", "from shared.features import pod_class_code as c; "
                          "print(c('a100'), c('h100-tp2'))"], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(pod_class_code("a100")), str(pod_class_code("h100-tp2"))]
    assert pod_class_code("a100") != pod_class_code("h100-tp2")
