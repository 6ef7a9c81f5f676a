"""While a model kind is still served by a prior: a challenger that is that prior rescaled to the pool's rows.

A prior (the built-in GPU roofline, or a seed learnt in the simulator for the engine) tends to get the *shape*
of latency against prompt length and load right sooner than its *level*: a CPU engine runs 4-6x slower than
the roofline's GPU, a loaded machine 10-30 % slower than the profile it was measured on. A fit on the first few
dozen rows learns the level but not yet the shape, and under-covers. The rescaled prior keeps the prior's
trees and multiplies every served quantile by one factor ``s > 1``: the split-conformal quantile of
``y / prior`` over the rows before the newest (order statistic ``ceil(alpha (n + 1))`` of ``n``, which covers
``alpha`` of exchangeable next rows in expectation however small ``n`` is). It is scored on the newest rows
exactly as a fitted challenger is, and the better of the two (covering first, then pinball) challenges the
live model. It stays marked ``prior``: fitted models replace it on the usual test, without the shift bound.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from shared.bundle import Calibration, ModelEntry
from shared.features import TARGET_OF
from shared.model import SCALE_BOUNDS, LoadedBundle, quantile_key
from trainer.calibrate import conformal_rank
from trainer.evaluate import score
from trainer.fit import FitParams, matrix_columns
from trainer.fitted import FittedModel, probe_columns
from trainer.window import Rows


def conformal_factor(ratio: np.ndarray, alpha: float) -> float:
    """The ``conformal_rank``-th smallest of the positive finite ``ratio`` values (1.0 when there are none)."""
    ordered = np.sort(ratio[np.isfinite(ratio) & (ratio > 0)])
    if not len(ordered):
        return 1.0
    return float(ordered[conformal_rank(len(ordered), alpha) - 1])


def primary_calibration(entry: ModelEntry, default_quantile: float) -> Calibration:
    primary = entry.primary_quantile if entry.primary_quantile is not None else default_quantile
    if entry.calibrations is not None and quantile_key(primary) in entry.calibrations:
        return entry.calibrations[quantile_key(primary)]
    return entry.calibration or Calibration()


def scale_limits(entry: ModelEntry, default_quantile: float) -> tuple[float, float]:
    """The factors that keep the primary quantile's calibration scale inside ``SCALE_BOUNDS``."""
    scale = primary_calibration(entry, default_quantile).scale
    return SCALE_BOUNDS[0] / scale, SCALE_BOUNDS[1] / scale


def rescaled_entry(entry: ModelEntry, factor: float, rows: int) -> ModelEntry:
    """``entry`` serving every quantile ``factor`` times higher (``value × scale + offset``, both scaled); a
    quantile whose scale would leave ``SCALE_BOUNDS`` (a tail quantile already calibrated far up) stops at the
    bound (the served quantiles are sorted, so they never cross)."""
    def times(c: Calibration) -> Calibration:
        scale = min(max(c.scale * factor, SCALE_BOUNDS[0]), SCALE_BOUNDS[1])
        return Calibration(scale=scale, offset=c.offset * scale / c.scale)

    cals = None if entry.calibrations is None else {k: times(c) for k, c in entry.calibrations.items()}
    primary = None if entry.calibration is None else times(entry.calibration)
    return entry.model_copy(update={"calibrations": cals, "calibration": primary, "training_rows": rows,
                                    "candidate": f"prior x{factor:.3g}", "prior": True})


def rescaled_prior(live: LoadedBundle, name: str, fitted: FittedModel, before: Rows,
                   params: FitParams) -> FittedModel | None:
    """The live prior of ``name`` raised to cover ``before`` (the rows older than ``fitted.newest``) and scored on
    ``fitted.newest`` like ``fitted``; None when it needs no raise. Only upward: a prior that over-covers is
    conservative, and is replaced by a fit that does better (shrinking it to "just" α on early rows left no margin
    once load grew: `make demo` on sim pods covered 67–84 % instead of 91–100 %)."""
    zero = params.tpot_zero_token_count
    y_before = before.column(TARGET_OF[name])
    base = live.predict(name, matrix_columns(name, before.data, zero))
    entry = live.bundle.model_entry(name)
    low, high = scale_limits(entry, params.alpha)
    factor = min(max(conformal_factor(y_before / np.maximum(base, 1e-9), params.alpha), low), high)
    if factor <= 1.0:
        return None
    newest = fitted.newest
    pred = live.predict(name, matrix_columns(name, newest.data, zero)) * factor
    scores = score(pred, newest.column(TARGET_OF[name]), params.alpha)
    new_entry = rescaled_entry(entry, factor, len(before))
    new_entry = new_entry.model_copy(update={"metrics": scores.as_dict(), "holdout_rows": len(newest),
                                             "fit_seconds": 0.0})
    grid = probe_columns()
    if name == "tpot" and zero:
        grid["num_tokens_generated"] = np.zeros(len(next(iter(grid.values()))))
    return replace(fitted, files=live.bundle.model_files(name), entry=new_entry, scores=scores, reference=scores,
                   fit_seconds=0.0, probe=live.predict(name, grid) * factor, holdout_pred=pred)
