"""The numpy forest as a ``shared.model.Loader``: how a bundle's models are evaluated without XGBoost.

Per model the bundle's array form (``forest_file``, written by trainers since issue 22) is decoded, or, for older
bundles, its ``.ubj`` boosters are compiled (``shared.forest_file``); the quantile booster and its location booster
are folded into one forest (``shared.forest.fold``). Bit-equal to XGBoost's ``inplace_predict`` on the same bundle
and 7–10× faster on the few rows of one routing decision (TTFT + TPOT of 4 pods: 1.61 ms → 0.16 ms,
measured when it was introduced; see docs/benchmarks-history.md). The predictor serves with it; the simulator's
in-process retrainer predicts with it, so a replay evaluates what the predictor serves.
"""

from __future__ import annotations

from shared.bundle import Bundle
from shared.errors import BundleError
from shared.forest import Trees, fold
from shared.forest_file import decode, from_booster_files
from shared.model import Evaluator


def _trees(bundle: Bundle, name: str) -> tuple[Trees, Trees | None, str]:
    entry = bundle.model_entry(name)
    if entry.forest_file:
        return (*decode(bundle.files[entry.forest_file]), "bundle")
    try:
        return (*from_booster_files(bundle.files, entry.file, entry.location_file), "booster files")
    except BundleError as exc:
        raise BundleError(f"{exc.message}; this bundle has no array form (forest_file, written by trainers since "
                          "issue 22) and the predictor evaluates without XGBoost") from None


def forest_loader(bundle: Bundle, name: str, nthread: int) -> tuple[Evaluator, str]:
    """``shared.model.Loader`` of the numpy forest: ``(evaluator, "bundle" | "booster files")``."""
    try:
        main, location, origin = _trees(bundle, name)
        n_features = len(bundle.model_entry(name).features)
        if main.n_features != n_features:
            raise BundleError(f"model has {main.n_features} features, spec {n_features}")
        return fold(main, location).predict, origin
    except BundleError as exc:
        raise BundleError(f"{name}: {exc.message}") from None
