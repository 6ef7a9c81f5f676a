"""In-process retraining for the replay, in virtual time, with the trainer's own fitting code.

Samples go into a ``trainer.window.Window`` (stratified train store + newest-rows holdout);
``retrain()`` fits and calibrates both models with ``trainer.fitted.fit_model`` (as the trainer's
retrain cycle does) and assembles a bundle with ``shared.bundle`` that is loaded with ``shared.model.load_bundle``
and evaluated by the predictor's numpy forest (``shared.forest_loader``) — the same code paths as trainer and
predictor, minus HTTP and disk. Each model's base is shrunk toward the previous fit's; below ``min_samples`` rows
only the base is fitted (from ``min_fresh`` rows on). As in the trainer, every sample is first scored against the
model that served it (its coverage feeds the adaptive calibration level, ``trainer.adaptive``, with the trainer's
step and bounds). No challenger check — a new fit replaces the previous one —
except the trainer's publish sweep (``trainer.monotone_check``): a model that falls as a load feature grows is
refused and counted (``refused``), the previous one stays.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from shared.bundle import ModelEntry, assemble, in_memory
from shared.columns import to_columns
from shared.features import MODEL_NAMES, TARGET_OF, FeatureSpec
from shared.forest_loader import forest_loader
from shared.model import LoadedBundle, entry_base, load_bundle, load_model
from shared.timefmt import rfc3339
from trainer.adaptive import AdaptiveLevel
from trainer.cycle import MIN_FRESH_ROWS, bundle_meta
from trainer.fit import FitParams, matrix_columns
from trainer.fitted import FittedModel, fit_model
from trainer.monotone_check import Drop, drops
from trainer.store.record import STORED_FIELDS, columns_to_matrix
from trainer.window import Rows, Window


@dataclass(frozen=True)
class RetrainSettings:
    min_samples: int = 100
    """Rows from which the trees are fitted on top of the base."""
    min_fresh: int = 10
    """Rows from which a model is fitted at all (its base alone below ``min_samples``)."""
    bucket_cap: int = 500
    holdout_ratio: float = 0.1
    max_holdout: int = 2000
    rounds: int = 60
    nthread: int = 1
    alpha: float = 0.9
    quantile_rows: int = 10_000
    adapt_rate: float = 0.2
    """``LATENCY_CALIBRATION_ADAPT_RATE`` (0: calibrate at ``alpha`` always)."""


def columns_index(name: str) -> int:
    """The stored-layout column of ``name``'s target."""
    return STORED_FIELDS.index(TARGET_OF[name])


def sample_matrix(samples: Sequence[Mapping[str, float | int | str]]) -> np.ndarray:
    """TrainingEntry rows → float64 matrix in ``STORED_FIELDS`` order, validated as the trainer's ingest does."""
    return columns_to_matrix(to_columns(list(samples), ["samples"], targets=True))


class InProcessRetrainer:
    def __init__(self, settings: RetrainSettings, spec: FeatureSpec | None = None) -> None:
        self.settings = settings
        self.spec = spec or FeatureSpec()
        # the replay only reads the primary quantile: one quantile (and 10k quantile rows) keep a fit cheap
        # enough for ~180 retrains per replayed hour; both default candidates stay (conv, 8 pods, 8x: P99 TTFT
        # 465 ms with both vs 544 ms with depth 6 alone, at the same wall time)
        self.params = FitParams(alpha=settings.alpha, quantiles=(settings.alpha,), rounds=settings.rounds,
                                nthread=settings.nthread, quantile_rows=settings.quantile_rows,
                                tree_min_rows=settings.min_samples)
        self.window = Window(settings.bucket_cap, settings.holdout_ratio, settings.max_holdout)
        self.adaptive = AdaptiveLevel(settings.alpha, settings.adapt_rate, MIN_FRESH_ROWS)
        self._pending: list[Mapping[str, float | int | str]] = []
        self._seq = 0
        self.model: LoadedBundle | None = None
        self.version = 0
        self.checked = 0
        """Fitted models put through the publish sweep ..."""
        self.refused: list[Drop] = []
        """... and the falls of those it refused."""

    def add(self, sample: Mapping[str, float | int | str]) -> None:
        self._pending.append(sample)

    def _ingest(self, now: float) -> None:
        if not self._pending:
            return
        matrix = sample_matrix(self._pending)
        self._observe(matrix)
        self.window.add(self._seq, matrix, now)
        self._seq += len(matrix)
        self._pending = []

    def _observe(self, matrix: np.ndarray) -> None:
        """The live model's coverage on the rows that arrived (the trainer's prequential check)."""
        if self.model is None:
            return
        for name in MODEL_NAMES:
            y = matrix[:, columns_index(name)]
            rows = matrix[y > 0]
            if len(rows):
                served = self.model.predict(name, matrix_columns(name, rows, self.params.tpot_zero_token_count))
                self.adaptive.observe(name, float(np.mean(y[y > 0] <= served)), len(rows),
                                      self.model.bundle.model_entry(name).calibration_level)

    def retrain(self, now: float = 0.0) -> bool:
        """Fit and swap in a new bundle if both models have enough rows; True when swapped. ``now`` is the
        virtual time: rows arriving since the last call are stamped with it (recency weights)."""
        self._ingest(now)
        models: dict[str, tuple[dict[str, bytes], ModelEntry]] = {}
        for name in MODEL_NAMES:
            train, holdout = self.window.snapshot(name)
            if len(train) + len(holdout) < self.settings.min_fresh or not len(holdout):
                return False
            prior = entry_base(self.model.bundle.model_entry(name)) if self.model is not None else None
            params = replace(self.params, calibration_level=self.adaptive.level(name))
            fitted = fit_model(self.spec, name, train, holdout, params, prior=prior)
            if self._falls(fitted, Rows.concat([train, holdout])):
                if self.model is None:
                    return False
                models[name] = (self.model.bundle.model_files(name), self.model.bundle.model_entry(name))
            else:
                models[name] = (fitted.files, fitted.entry)
        self.version += 1
        manifest, files = assemble(self.version, rfc3339(), models, bundle_meta(self.spec, self.params, prior=False),
                                   None)
        self.model = load_bundle(in_memory(manifest, files), self.spec, nthread=1, loader=forest_loader)
        return True

    def _falls(self, fitted: FittedModel, rows: Rows) -> bool:
        """Whether ``fitted`` falls along a load sweep (recorded in ``refused``)."""
        manifest, files = assemble(0, rfc3339(), {fitted.name: (fitted.files, fitted.entry)},
                                   bundle_meta(self.spec, self.params, prior=False), None)
        model = load_model(in_memory(manifest, files), fitted.name, self.spec, 1, forest_loader)
        found = drops(model, self.spec, rows.data, self.params.tpot_zero_token_count)
        self.checked += 1
        self.refused += found
        return bool(found)
