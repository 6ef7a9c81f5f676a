"""Strict bulk response decoding: anything but n finite, non-negative predictions is a fallback."""

from __future__ import annotations

import orjson
import pytest

from router_client.errors import PredictionUnavailable
from router_client.predictor_client import Prediction, parse_predictions


def body(preds: list[dict]) -> bytes:
    return orjson.dumps({"predictions": preds, "total_requests": len(preds)})


GOOD = {"ttft_ms": 12.5, "tpot_ms": 3.0, "predicted_at": "2026-01-01T00:00:00+00:00"}

CASES = [
    ("ok", body([GOOD, {**GOOD, "ttft_ms": 20}]), 2, [(12.5, 3.0), (20.0, 3.0)]),
    ("ints accepted", body([{"ttft_ms": 1, "tpot_ms": 2}]), 1, [(1.0, 2.0)]),
    ("short array", body([GOOD]), 2, None),
    ("long array", body([GOOD, GOOD]), 1, None),
    ("negative", body([{**GOOD, "tpot_ms": -1}]), 1, None),
    ("null value", body([{**GOOD, "ttft_ms": None}]), 1, None),
    ("missing key", body([{"ttft_ms": 1.0}]), 1, None),
    ("not json", b"<html>", 1, None),
    ("no predictions key", orjson.dumps({"detail": "Models not ready"}), 1, None),
    ("non-finite (stdlib JSON)", b'{"predictions": [{"ttft_ms": 1e999, "tpot_ms": 1}]}', 1, None),
]


@pytest.mark.parametrize(("name", "raw", "n", "want"), CASES, ids=[c[0] for c in CASES])
def test_parse_predictions(name: str, raw: bytes, n: int, want: list[tuple[float, float]] | None) -> None:
    if want is None:
        with pytest.raises(PredictionUnavailable) as info:
            parse_predictions(raw, n)
        assert info.value.reason == "decode"
    else:
        assert parse_predictions(raw, n) == [Prediction(*w) for w in want]


def test_admission_quantile_is_read_from_the_quantiles_objects() -> None:
    row = {**GOOD, "ttft_quantiles_ms": {"0.99": 40.0}, "tpot_quantiles_ms": {"0.99": 9.0}}
    assert parse_predictions(body([row]), 1, 0.99) == [Prediction(12.5, 3.0, 40.0, 9.0)]
    with pytest.raises(PredictionUnavailable):
        parse_predictions(body([GOOD]), 1, 0.99)  # asked for p99, the predictor did not answer it
