"""One retrain cycle: fit each model, calibrate, score against the live bundle, publish winners.

Per model: needs ≥ ``min_samples`` rows (train + holdout) and new rows since its last fit.
The challenger is scored with cross-fitted calibration on the holdout (the newest rows); the
live model is scored on the same rows. A challenger that is not worse (pinball loss; RMSE in
mean mode) replaces the live model; otherwise the live model is carried into the next bundle.
A bundle is published when at least one model won. One log line per fitted model. TTFT and
TPOT are fitted concurrently (XGBoost releases the GIL), each with its share of the threads.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from shared.errors import TrainingError
from shared.features import MODEL_NAMES, FeatureSpec
from shared.model import LoadedBundle, load_bundle
from trainer.calibrate import cross_calibrated
from trainer.evaluate import Scores, score
from trainer.fit import FitParams, training_columns
from trainer.fitted import fit_model
from trainer.live import LiveBundle
from trainer.metrics import TrainerMetrics
from trainer.publisher import Publisher
from trainer.window import Window

log = logging.getLogger("trainer.retrain")


@dataclass
class Challenger:
    name: str
    rows: int
    scores: Scores
    live_scores: Scores | None
    fit_seconds: float
    data: bytes
    rows_added: int
    entry: dict[str, Any] = field(default_factory=dict)

    def wins(self, objective: str) -> bool:
        return self.live_scores is None or self.scores.loss(objective) <= self.live_scores.loss(objective)


class Retrainer:
    def __init__(self, spec: FeatureSpec, params: FitParams, min_samples: int, window: Window,
                 publisher: Publisher, live: LiveBundle, metrics: TrainerMetrics) -> None:
        self.spec, self.params, self.min_samples = spec, params, min_samples
        self.window, self.publisher, self.live, self.metrics = window, publisher, live, metrics
        self._fitted_at_rows = {name: -1 for name in MODEL_NAMES}
        self.last_cycle_fitted = False

    def run_once(self) -> int | None:
        """Run a cycle; returns the published version, or None when nothing was published."""
        with ThreadPoolExecutor(max_workers=len(MODEL_NAMES), thread_name_prefix="fit") as pool:
            results = list(pool.map(self._challenge, MODEL_NAMES))
        challengers = [c for c in results if c is not None]
        self.last_cycle_fitted = bool(challengers)
        if not challengers:
            return None
        winners = {c.name: c for c in challengers if c.wins(self.params.objective)}
        version = self._publish(winners) if winners else None
        for c in challengers:
            self._fitted_at_rows[c.name] = c.rows_added  # only after the cycle succeeded: a failure retries
            self._report(c, version if c.name in winners else None)
        return version

    def _challenge(self, name: str) -> Challenger | None:
        added = self.window.rows_added(name)
        train, holdout = self.window.snapshot(name)
        total = len(train) + len(holdout)
        if total < self.min_samples or added == self._fitted_at_rows[name] or len(train) < 2 or len(holdout) < 2:
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s not retrained: %d samples (threshold %d), %d new", name.upper(), total,
                          self.min_samples, added - self._fitted_at_rows[name])
            return None
        fitted = fit_model(self.spec, name, train, holdout, self.params)
        alpha, objective, y_hold = self.params.alpha, self.params.objective, fitted.y_holdout
        scores = score(cross_calibrated(fitted.raw_holdout, y_hold, alpha, objective), y_hold, alpha)
        live = self.live.get()
        live_scores = None
        if live is not None:
            cols = training_columns(name, holdout, self.params.tpot_zero_token_count)
            live_scores = score(live.predict(name, cols), y_hold, alpha)
        self.metrics.fit_seconds.labels(model=name).observe(fitted.fit_seconds)
        return Challenger(name, len(train), scores, live_scores, fitted.fit_seconds, fitted.data, added,
                          {**fitted.entry, "metrics": scores.as_dict()})

    def _publish(self, winners: dict[str, Challenger]) -> int:
        live = self.live.get()
        models: dict[str, tuple[bytes, dict[str, Any]]] = {}
        for name in MODEL_NAMES:
            if name in winners:
                models[name] = (winners[name].data, winners[name].entry)
            elif live is not None:
                models[name] = (live.bundle.model_bytes(name), dict(live.bundle.model_entry(name)))
            else:
                raise TrainingError(f"no live {name} model to carry into the new bundle")
        meta = bundle_meta(self.spec, self.params, all(bool(e.get("prior")) for _, e in models.values()))
        bundle = self.publisher.publish(models, meta)
        loaded: LoadedBundle = load_bundle(bundle, self.spec, nthread=1)
        self.live.set(loaded)
        self.metrics.live_version.set(loaded.version)
        return loaded.version

    def _report(self, c: Challenger, version: int | None) -> None:
        s = c.scores
        if version is not None:
            outcome = f"published v{version}"
        else:
            crit = "pinball" if self.params.objective == "quantile" else "rmse"
            live_loss = c.live_scores.loss(self.params.objective) if c.live_scores else float("nan")
            outcome = f"kept v{self.live.version}: {crit} {s.loss(self.params.objective):.2f} > {live_loss:.2f}"
        log.info("%s model trained on %d samples. MAE = %.2f, RMSE = %.2f, coverage = %.1f%%, pinball = %.2f "
                 "(fit %.2f s, %s)", c.name.upper(), c.rows, s.mae, s.rmse, 100 * s.coverage, s.pinball,
                 c.fit_seconds, outcome)
        self.metrics.record_scores(c.name, s)
        self.metrics.decisions.labels(model=c.name, decision="published" if version else "kept").inc()


def bundle_meta(spec: FeatureSpec, params: FitParams, prior: bool) -> dict[str, Any]:
    return {"feature_flags": spec.as_dict(), "model_type": "xgboost", "objective_type": params.objective,
            "quantile": params.alpha, "prior": prior}
