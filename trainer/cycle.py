"""One retrain cycle: fit each model, score it against the live bundle, publish winners.

Per model: needs ≥ ``min_samples`` rows (train + holdout; ``LATENCY_MIN_SAMPLES_FOR_RETRAIN_FRESH``: the physical
base alone below ``FitParams.tree_min_rows``) and new rows since its last fit. The base is shrunk toward the live
model's (the prior's at first). The challenger (``trainer.fitted``: base, candidates, selection, multi-quantile
booster, calibration) must be monotone in the load features along a sweep far past the window
(``trainer.monotone_check``; a model that falls is refused, with the feature and the drop logged) and is scored
with cross-fitted calibration on the newest rows and on the stratified reference slice; the live
model is scored on the same newest rows. A challenger replaces the live model when it is not worse
there beyond noise (paired per-row pinball loss — squared error in mean mode — at most ``NOISE_Z`` standard
errors above the live model's) **and** it does not move predictions too far too fast: when
its primary quantile on a fixed probe grid differs from the live model's by more than
``shift_bound`` (median ratio), it is published only when the shift *persists* — the previous cycle
saw a shift in the same direction and the rows that arrived since then still contradict the live
model (its prequential coverage on them is outside the drift band on the matching side). A one-off
burst cannot move the served model; a real level shift of the pool is learned at the second cycle.
A model that is not published is carried unchanged into the next bundle; one log line per model.
TTFT and TPOT are fitted concurrently (XGBoost releases the GIL), each with its share of the threads.
"""

from __future__ import annotations

import logging
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from shared.bundle import ModelEntry, assemble, in_memory
from shared.errors import TrainingError
from shared.features import MODEL_NAMES, TARGET_OF, FeatureSpec
from shared.model import LoadedBundle, entry_base, load_bundle, load_model
from shared.timefmt import rfc3339
from trainer.adaptive import AdaptiveLevel
from trainer.budget import FitBudget
from trainer.evaluate import Scores, covers, not_worse, row_losses, score
from trainer.fit import FitParams, matrix_columns
from trainer.fitted import FittedModel, fit_model, probe_columns
from trainer.history import RetrainHistory
from trainer.live import LiveBundle
from trainer.metrics import TrainerMetrics
from trainer.monotone_check import Drop, drops
from trainer.prequential import Prequential
from trainer.publisher import Publisher
from trainer.recency import Recency
from trainer.window import Rows, Window

log = logging.getLogger("trainer.retrain")
MIN_FRESH_ROWS = 20
MIN_FIT_ROWS = 3
"""A fit needs this many rows (train + holdout) whatever ``LATENCY_MIN_SAMPLES_FOR_RETRAIN_FRESH`` says: the base alone
is cross-validated on every row (``trainer.thin``), and a conformal quantile of three residuals (their largest)
covers a fourth row with probability 3/4. With trees, the window's holdout must hold a row too (10 %: from 10 rows).
"""
NOISE_Z = 2.0
"""A challenger is kept out only when it is worse than the live model by more than this many standard errors of
the paired per-row loss difference on the newest rows."""
MIN_COMPARE_ROWS = 5
"""The live model is judged only on newest rows it was not fitted on; with fewer than this many the challenger —
fitted on more rows — is not compared at all (a thin pool's fit scored against a live model that saw the same
rows would lose to that model's in-sample fit every cycle)."""


@dataclass
class Challenger:
    fitted: FittedModel
    rows: int
    live_scores: Scores | None
    paired: tuple[np.ndarray, np.ndarray] | None
    """Per-row losses of (challenger, live model) on the same newest rows (None: no live model, or too few rows it
    was not fitted on)."""
    rows_added: int
    shift: float | None
    """Median ratio challenger / live of the primary quantile on the probe grid (None: no trained live model)."""
    live_rows: int = 0
    """Rows the live model was trained on (0: the prior): the shift bound protects only an established model."""
    held: str | None = None
    """Why a challenger that scored well is held back (its shift has not persisted yet)."""
    undercovers: str | None = None
    """Why a challenger was kept out for its coverage (``covers``)."""
    falls: tuple[Drop, ...] = ()
    """Where the challenger falls as a load feature grows (``trainer.monotone_check``): refused when any."""
    compared: Scores | None = None
    """The challenger's own scores on the rows it was compared with the live model on."""

    @property
    def name(self) -> str:
        return self.fitted.name

    def better(self) -> bool:
        """Not worse than the live model on the newest rows, beyond noise (``NOISE_Z``)."""
        return self.paired is None or not_worse(*self.paired, NOISE_Z)

    def covers(self, alpha: float) -> bool:
        """Its honest coverage on the newest rows is consistent with ``alpha`` (within ``NOISE_Z`` binomial s.e.),
        or not below the live model's on the same rows: an under-covering fit never replaces a better-covering
        model, however well it scores on pinball (a few dozen rows cannot show that a p90 is a p90)."""
        s, live = self.compared or self.fitted.scores, self.live_scores
        return live is None or covers(s.coverage, s.n, alpha, NOISE_Z) or s.coverage >= live.coverage


class Retrainer:
    def __init__(self, spec: FeatureSpec, params: FitParams, min_samples: int, window: Window,
                 publisher: Publisher, live: LiveBundle, metrics: TrainerMetrics, prequential: Prequential,
                 recency: Recency, shift_bound: float = 1.5, history: RetrainHistory | None = None,
                 budget: FitBudget | None = None, shift_min_rows: int = 0,
                 adaptive: AdaptiveLevel | None = None) -> None:
        self.spec, self.params, self.min_samples = spec, params, min_samples
        self.budget = budget or FitBudget(0.0, 0)
        self.last_entries: dict[str, ModelEntry] = {}
        """Each model's newest fitted manifest entry (published or not): what the last fit chose and cost."""
        self.window, self.publisher, self.live, self.metrics = window, publisher, live, metrics
        self.prequential, self.recency, self.shift_bound = prequential, recency, shift_bound
        self.shift_min_rows = shift_min_rows
        self.adaptive = adaptive or AdaptiveLevel(params.alpha, 0.0)
        self.history = history
        self._fitted_at_rows = {name: -1 for name in MODEL_NAMES}
        self._live_through: dict[str, int | None] = dict.fromkeys(MODEL_NAMES)
        """The newest row (sequence number) the live model was fitted on, when this process published it."""
        self._pending: dict[str, int] = dict.fromkeys(MODEL_NAMES, 0)
        self.last_cycle_fitted = False

    def run_once(self) -> int | None:
        """Run a cycle; returns the published version, or None when nothing was published."""
        fresh = {name: self.prequential.interval(name) for name in MODEL_NAMES}
        live = self.live.get()
        for name in MODEL_NAMES:
            served = live.bundle.model_entry(name).calibration_level if live is not None else None
            self.adaptive.observe(name, *fresh[name], served_level=served)
        with ThreadPoolExecutor(max_workers=len(MODEL_NAMES), thread_name_prefix="fit") as pool:
            results = list(pool.map(self._challenge, MODEL_NAMES))
        challengers = [c for c in results if c is not None]
        self.last_cycle_fitted = bool(challengers)
        if not challengers:
            return None
        winners = {c.name: c for c in challengers if self._admit(c, fresh[c.name])}
        version = self._publish(winners) if winners else None
        for c in challengers:
            self._fitted_at_rows[c.name] = c.rows_added  # only after the cycle succeeded: a failure retries
            if version is not None and c.name in winners:
                self._live_through[c.name] = c.fitted.fitted_through
            self._report(c, version if c.name in winners else None)
        return version

    def _challenge(self, name: str) -> Challenger | None:
        added = self.window.rows_added(name)
        train, holdout = self.window.snapshot(name)
        total = len(train) + len(holdout)
        thin = total < self.params.tree_min_rows
        if total < max(self.min_samples, MIN_FIT_ROWS) or added == self._fitted_at_rows[name] or \
                not (thin or len(holdout)):
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s not retrained: %d samples (threshold %d), %d new", name.upper(), total,
                          self.min_samples, added - self._fitted_at_rows[name])
            return None
        params = replace(self.budget.params(name, self.params), calibration_level=self.adaptive.level(name))
        live = self.live.get()
        prior = entry_base(live.bundle.model_entry(name)) if live is not None else None
        fitted = fit_model(self.spec, name, train, holdout, params, self.recency, prior)
        self.budget.observe(name, fitted.entry)
        self.last_entries[name] = fitted.entry
        self.metrics.fit_seconds.labels(model=name).observe(fitted.fit_seconds)
        falls = tuple(self._falls(fitted, train, holdout))
        if live is None:
            return Challenger(fitted, len(train), None, None, added, None, falls=falls)
        through = self._live_through[name]
        unseen = np.ones(len(fitted.newest), bool) if through is None else fitted.newest.seq > through
        shift, live_rows = self._shift(live, name, fitted), live.bundle.model_entry(name).training_rows
        if unseen.sum() < MIN_COMPARE_ROWS:
            return Challenger(fitted, len(train), None, None, added, shift, live_rows, falls=falls)
        newest = fitted.newest.take(unseen)
        y = newest.column(TARGET_OF[name])
        served = live.predict(name, matrix_columns(name, newest.data, self.params.tpot_zero_token_count))
        mine = fitted.holdout_pred[unseen]
        a, objective = self.params.alpha, self.params.objective
        paired = (row_losses(mine, y, a, objective), row_losses(served, y, a, objective))
        return Challenger(fitted, len(train), score(served, y, a), paired, added, shift, live_rows, falls=falls,
                          compared=score(mine, y, a))

    def _falls(self, fitted: FittedModel, train: Rows, holdout: Rows) -> list[Drop]:
        """``fitted``'s falls along the load sweeps over its window (``trainer.monotone_check``)."""
        name = fitted.name
        manifest, files = assemble(0, rfc3339(), {name: (fitted.files, fitted.entry)},
                                   bundle_meta(self.spec, self.params, prior=False), None)
        model = load_model(in_memory(manifest, files), name, self.spec, nthread=1)
        data = Rows.concat([r for r in (train, holdout) if len(r)] or [Rows.empty()]).data
        return drops(model, self.spec, data, self.params.tpot_zero_token_count)

    def _shift(self, live: LoadedBundle, name: str, fitted: FittedModel) -> float | None:
        if live.bundle.model_entry(name).prior:  # the shift bound protects a model trained on this pool
            return None
        grid = probe_columns()
        if name == "tpot" and self.params.tpot_zero_token_count:
            grid["num_tokens_generated"] = np.zeros(len(fitted.probe))
        before = live.predict(name, grid)
        ok = (before > 0) & (fitted.probe > 0)
        return float(np.median(fitted.probe[ok] / before[ok])) if ok.any() else None

    def _admit(self, c: Challenger, fresh: tuple[float | None, int]) -> bool:
        """Monotone, better on the newest rows, and (beyond the shift bound) a shift that persists."""
        if c.falls or not c.better() or not self._covers(c):
            self._pending[c.name] = 0
            return False
        if c.shift is None or abs(math.log(c.shift)) <= math.log(self.shift_bound) or c.live_rows < self.shift_min_rows:
            self._pending[c.name] = 0
            return True
        direction = 1 if c.shift > 1 else -1
        coverage, rows = fresh
        low, high = self.prequential.band
        contradicts = coverage is not None and rows >= MIN_FRESH_ROWS and (
            coverage < low if direction > 0 else coverage > high)
        if contradicts and self._pending[c.name] == direction:
            self._pending[c.name] = 0
            return True
        self._pending[c.name] = direction if contradicts else 0
        seen = "n/a" if coverage is None else f"{coverage:.2f} on {rows} rows"
        c.held = f"shift x{c.shift:.2f} on the probe grid held until it persists (fresh live coverage {seen})"
        return False

    def _covers(self, c: Challenger) -> bool:
        if self.params.objective != "quantile" or c.covers(self.params.alpha):
            return True
        s, live = c.compared or c.fitted.scores, c.live_scores
        c.undercovers = (f"coverage {100 * s.coverage:.1f}% < {100 * self.params.alpha:g}% beyond noise and below the "
                         f"live model's {100 * (live.coverage if live else 0.0):.1f}% on the same {s.n} newest rows")
        return False

    def _publish(self, winners: dict[str, Challenger]) -> int:
        live = self.live.get()
        models: dict[str, tuple[dict[str, bytes], ModelEntry]] = {}
        for name in MODEL_NAMES:
            if name in winners:
                models[name] = (winners[name].fitted.files, winners[name].fitted.entry)
            elif live is not None:
                models[name] = (live.bundle.model_files(name), live.bundle.model_entry(name))
            else:
                raise TrainingError(f"no live {name} model to carry into the new bundle")
        meta = bundle_meta(self.spec, self.params, all(e.prior for _, e in models.values()))
        bundle = self.publisher.publish(models, meta)
        loaded: LoadedBundle = load_bundle(bundle, self.spec, nthread=1)
        self.live.set(loaded)
        self.metrics.live_version.set(loaded.version)
        return loaded.version

    def _report(self, c: Challenger, version: int | None) -> None:
        s, entry = c.fitted.scores, c.fitted.entry
        if version is not None:
            outcome = f"published v{version}"
        elif c.falls:
            outcome = f"kept v{self.live.version}: not monotone: " + "; ".join(d.describe() for d in c.falls)
        elif c.held is not None:
            outcome = f"kept v{self.live.version}: {c.held}"
        elif c.undercovers is not None:
            outcome = f"kept v{self.live.version}: {c.undercovers}"
        else:
            crit = "pinball" if self.params.objective == "quantile" else "rmse"
            live_loss = c.live_scores.loss(self.params.objective) if c.live_scores else float("nan")
            mine = c.compared or s
            outcome = (f"kept v{self.live.version}: {crit} {mine.loss(self.params.objective):.2f} > {live_loss:.2f} "
                       f"beyond noise ({NOISE_Z:g} s.e.) on the {mine.n} newest rows it was not fitted on")
        shift = "n/a" if c.shift is None else f"x{c.shift:.2f}"
        used, rows = entry.location_fit_rows, entry.fit_rows
        budget = f", location on {used} of {rows} rows (fit budget)" if used < rows else ""
        log.info("%s model trained on %d samples. MAE = %.2f, RMSE = %.2f, coverage = %.1f%%, pinball = %.2f "
                 "(reference pinball %.2f, chose %s, rounds %d+%d, shift %s, fit %.2f s%s, base %s, %s)",
                 c.name.upper(), c.rows, s.mae, s.rmse, 100 * s.coverage, s.pinball, c.fitted.reference.pinball,
                 entry.candidate, entry.location_rounds, entry.quantile_rounds, shift, c.fitted.fit_seconds, budget,
                 describe_base(entry), outcome)
        self.metrics.record_scores(c.name, s)
        self.metrics.record_base(c.name, entry)
        decision = "published" if version else ("refused" if c.falls else "held" if c.held else "kept")
        self.metrics.decisions.labels(model=c.name, decision=decision).inc()
        if self.history is not None:
            self.history.record(c.name, c.rows, c.fitted, decision, version or self.live.version, outcome, c.shift)


def describe_base(entry: ModelEntry) -> str:
    """``25 + 0.08·effective_input_tokens + …`` (ms; the terms with a coefficient > 0), or ``none``."""
    base = entry_base(entry)
    if base is None:
        return "none"
    parts = [f"{c:.4g}" if t == "1" else f"{c:.4g}·{t}" for t, c in zip(base.terms, base.coefficients, strict=True)
             if c > 0]
    return " + ".join(parts) or "0"


def bundle_meta(spec: FeatureSpec, params: FitParams, prior: bool) -> dict[str, Any]:
    return {"feature_flags": spec.as_dict(), "model_type": "xgboost", "objective_type": params.objective,
            "quantile": params.alpha, "quantiles": list(params.served), "prior": prior}
