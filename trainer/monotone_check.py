"""The publish check: every served quantile non-decreasing in the load features, swept far past the window.

Monotone by construction (a base with coefficients ≥ 0 on features ≥ 0, trees grown under monotone constraints and
repaired after the quantile objective re-fits their leaves, a positive calibration scale, quantiles sorted per
row), and checked all the same before a model is published: on ``SAMPLE_ROWS`` rows of the window, each load
field of ``LOAD_FIELDS`` is swept from 0 to ``SWEEP_MULTIPLE`` × the window's largest value (never past the
field's own upper bound, e.g. KV use 1.0) with every other field as the row has it, every served quantile is
predicted along the sweep, and any fall larger than float noise is a ``Drop``. The sweep works on raw fields, so
derived columns move with them (``num_request_waiting`` moves ``is_queued``, ``input_token_length`` moves
``effective_input_tokens``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from shared.features import FEATURE_FIELDS, FeatureSpec
from shared.model import LoadedModel
from trainer.fit import matrix_columns

LOAD_FIELDS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "ttft": ("input_token_length", "prefill_tokens_in_flight", "num_request_waiting"),
    "tpot": ("num_request_running", "decode_tokens_in_flight", "kv_cache_percentage"),
})
SWEEP_MULTIPLE = 8.0
SWEEP_POINTS = 48
SAMPLE_ROWS = 32
RELATIVE_NOISE = 1e-9
UPPER = {f.name: f.upper for f in FEATURE_FIELDS}


@dataclass(frozen=True)
class Drop:
    """The largest fall of one model along one field's sweep."""

    model: str
    field: str
    quantile: float
    at: float
    """The field's value before the fall ..."""
    to: float
    """... and after it."""
    before_ms: float
    after_ms: float

    def describe(self) -> str:
        return (f"{self.model.upper()} p{100 * self.quantile:g} falls from {self.before_ms:.4g} to "
                f"{self.after_ms:.4g} ms as {self.field} grows from {self.at:g} to {self.to:g}")


def sweep_values(window_max: float, upper: float | None) -> np.ndarray:
    """0 … ``SWEEP_MULTIPLE`` × the window's largest value (≥ 1), linear and geometric points, capped at ``upper``."""
    top = SWEEP_MULTIPLE * max(window_max, 1.0)
    if upper is not None:
        top = min(top, upper)
    points = np.concatenate([np.linspace(0.0, top, SWEEP_POINTS // 2),
                             np.geomspace(top / 1e4, top, SWEEP_POINTS - SWEEP_POINTS // 2)])
    return np.unique(points)


def sample(data: np.ndarray, rng: np.random.Generator, n: int = SAMPLE_ROWS) -> np.ndarray:
    """``n`` rows of a stored-layout matrix (all when fewer)."""
    if len(data) <= n:
        return data
    return data[np.sort(rng.choice(len(data), n, replace=False))]


def drops(model: LoadedModel, spec: FeatureSpec, data: np.ndarray, zero_token_count: bool,
          rng: np.random.Generator | None = None) -> list[Drop]:
    """The falls of ``model``'s served quantiles along each load field's sweep over ``data`` (the window's rows,
    stored layout): one ``Drop`` per field that falls, the largest; empty when monotone."""
    if not len(data):
        return []
    name = model.name
    window = matrix_columns(name, data, zero_token_count)
    rows = matrix_columns(name, sample(data, rng or np.random.default_rng(0)), zero_token_count)
    found = []
    for field in LOAD_FIELDS[name]:
        values = sweep_values(float(window[field].max()), UPPER.get(field))
        drop = _sweep(model, spec, rows, field, values)
        if drop is not None:
            found.append(drop)
    return found


def _sweep(model: LoadedModel, spec: FeatureSpec, rows: Mapping[str, np.ndarray], field: str,
           values: np.ndarray) -> Drop | None:
    m, g = len(rows[field]), len(values)
    cols = {k: np.repeat(v, g) for k, v in rows.items()}
    cols[field] = np.tile(values, m)
    table = model.calibrate(model.raw(spec.matrix(model.name, cols))).reshape(m, g, -1)
    fall = table[:, :-1, :] - table[:, 1:, :]
    fall = fall - RELATIVE_NOISE * np.abs(table[:, :-1, :])
    worst = np.unravel_index(int(np.argmax(fall)), fall.shape)
    if fall[worst] <= 0:
        return None
    row, step, q = (int(i) for i in worst)
    return Drop(model.name, field, model.quantiles[q], float(values[step]), float(values[step + 1]),
                float(table[row, step, q]), float(table[row, step + 1, q]))
