"""One fit of the prior per test process (the autouse ``one_prior_fit`` fixture, ``tests/trainer/conftest.py``).

Every trainer that starts with no data fits the same prior (``trainer.prior.fit_prior``: a fixed grid, seed 0,
one thread; ~0.8 s of XGBoost), and the trainer tests start in-process apps a few hundred times. There the
service gets this memo instead: the same bytes and manifest entries, a copy each time (no caller shares the cached
dicts); ``tests/trainer/test_prior_cache.py`` checks them against a fresh fit. Trainers started as subprocesses
fit their own.
"""

from __future__ import annotations

import copy
import functools

from shared.bundle import ModelEntry
from shared.features import FeatureSpec
from trainer.prior import fit_prior

ModelFiles = dict[str, tuple[dict[str, bytes], ModelEntry]]


@functools.cache
def _fit(spec: FeatureSpec, quantiles: tuple[float, ...], primary: float, nthread: int) -> ModelFiles:
    return fit_prior(spec, quantiles, primary, nthread)


def fit_prior_once(spec: FeatureSpec, quantiles: tuple[float, ...] = (0.5, 0.9, 0.99), primary: float = 0.9,
                   nthread: int = 1) -> ModelFiles:
    """``fit_prior``'s result for these arguments, fitted at the first call of the process."""
    return copy.deepcopy(_fit(spec, tuple(quantiles), primary, nthread))
