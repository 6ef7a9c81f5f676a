"""The trainer's composition root: builds every part from settings, starts and stops them.

Start-up order: replay the durable log into the window → load the live bundle (or import a
seed export, or publish the prior) → start the retrain loop. The HTTP layer only calls into
the objects held here.
"""

from __future__ import annotations

import logging
from pathlib import Path

from shared.bundle import (
    current_version,
    fallback_order,
    read_bundle,
    read_version,
    set_current,
    sha256,
)
from shared.errors import BundleError
from shared.model import LoadedBundle, load_bundle
from shared.trainer_settings import TrainerSettings
from shared.unknown_fields import UnknownFields
from trainer.adaptive import AdaptiveLevel
from trainer.base_fit import BaseFitParams
from trainer.budget import FitBudget
from trainer.cycle import MIN_FRESH_ROWS, Retrainer, bundle_meta
from trainer.fit import FitParams
from trainer.history import TrainerHistory
from trainer.idempotency import IdempotencyKeys
from trainer.ingest import IngestLimits, Ingestor, LiveChecks
from trainer.live import LiveBundle
from trainer.loop import RetrainLoop
from trainer.metrics import TrainerMetrics
from trainer.prequential import Prequential
from trainer.prior import fit_prior
from trainer.publisher import Publisher
from trainer.quarantine import Quarantine, QuarantinePolicy
from trainer.recency import Recency
from trainer.store import LogLimits, RowsRecord, SampleLog
from trainer.store.lock import DataDirLock
from trainer.window import Window

log = logging.getLogger(__name__)


def fit_params(settings: TrainerSettings) -> FitParams:
    s = settings
    return FitParams(objective=s.objective_type, alpha=s.quantile_alpha, quantiles=s.quantiles,
                     candidates=s.candidates, rounds=s.xgb_n_estimators, early_stopping=s.early_stopping_rounds,
                     learning_rate=s.xgb_learning_rate, max_bin=s.xgb_max_bin,
                     nthread=max(1, s.train_threads // 2), quantile_rows=s.fit_quantile_rows,
                     tpot_zero_token_count=s.tpot_zero_token_count,
                     prefix_weighting=s.sample_weighting_for_prefix_cache,
                     tree_min_rows=s.min_samples_for_retrain, prior_spread_rows=s.spread_prior_rows,
                     thin_empirical=s.thin_empirical,
                     base=BaseFitParams(prior_rows=s.base_prior_rows, loss=s.base_loss))


class TrainerService:
    def __init__(self, settings: TrainerSettings) -> None:
        self.settings = s = settings
        self.spec = s.feature_spec
        self.data_dir = Path(s.data_dir)
        self.lock = DataDirLock(self.data_dir)
        self.metrics = TrainerMetrics()
        self.live = LiveBundle()
        self.history = TrainerHistory()
        self.window = Window(s.max_training_data_size_per_bucket, s.test_train_ratio, s.max_test_data_size,
                             s.window_max_rows)
        self.log = SampleLog(self.data_dir / "log", LogLimits(s.retention_max_rows, s.retention_max_bytes,
                                                              s.segment_max_bytes))
        self.publisher = Publisher(self.data_dir / "bundles", s.hmac_key, s.bundles_kept)
        self.prequential = Prequential(s.quantile_alpha, s.prequential_window, (s.drift_band_low, s.drift_band_high),
                                       s.drift_hold_sec, s.tpot_zero_token_count, series=self.history.live)
        self.quarantine = Quarantine(QuarantinePolicy(s.quarantine_factor or float("inf"), s.quarantine_min_sources,
                                                      s.quarantine_sustain_intervals, s.quarantine_interval_sec))
        self.unknown = UnknownFields(self.metrics.count_unknown, s.strict_fields, "trainer")
        self.keys = IdempotencyKeys(s.idempotency_keys, s.idempotency_ttl_sec)
        self.ingestor = Ingestor(self.log, self.window, self.metrics, s.bounds,
                                 IngestLimits(s.max_ingest_rows, s.max_json_depth), self.unknown, self.keys,
                                 LiveChecks(self.live, self.prequential, self.quarantine), self.history.ingest)
        self.params = fit_params(s)
        self.retrainer = Retrainer(self.spec, self.params, s.min_samples_for_retrain_fresh, self.window, self.publisher,
                                   self.live, self.metrics, self.prequential,
                                   Recency(s.recency_half_life_sec, s.recency_floor), s.publish_shift_bound,
                                   self.history.retrains, FitBudget(s.fit_budget_sec, s.fit_min_location_rows),
                                   s.publish_shift_min_rows,
                                   AdaptiveLevel(s.quantile_alpha, s.calibration_adapt_rate, MIN_FRESH_ROWS))
        self.loop = RetrainLoop(self.retrainer, s.retraining_interval_sec, self.metrics, s.fit_nice)

    def start(self, run_loop: bool = True) -> None:
        self.lock.acquire()
        rows = self.replay()
        log.info("durable log: %d rows replayed (%d bytes)", rows, self.log.total_bytes)
        self.bootstrap()
        if run_loop:
            self.loop.start()

    def replay(self) -> int:
        rows = 0
        for record in self.log.replay():
            if isinstance(record, RowsRecord):
                self.ingestor.apply(record)
                rows += record.n_rows
            else:
                self.window.flush(record.flush_train, record.flush_test)
        return rows

    def bootstrap(self) -> None:
        loaded = self._load_current() or self._import_seed() or self._publish_prior()
        self.live.set(loaded)
        self.publisher.observe(loaded.version)
        self.metrics.live_version.set(loaded.version)

    def _load_current(self) -> LoadedBundle | None:
        """The live bundle on disk; when it fails verification or loading, the newest older one that works."""
        for version in fallback_order(self.publisher.root):
            try:
                loaded = load_bundle(read_version(self.publisher.root, version, self.settings.hmac_key), self.spec,
                                     nthread=1)
            except BundleError as exc:
                log.error("bundle v%d on disk rejected: %s", version, exc)
                continue
            if version != current_version(self.publisher.root):
                set_current(self.publisher.root, version, sha256(loaded.bundle.manifest_bytes))
                log.warning("live bundle unusable: serving v%d, the newest valid one", version)
            return loaded
        return None

    def _seed_path(self) -> Path:
        return Path(self.settings.seed_dir) if self.settings.seed_dir else self.data_dir / "seed"

    def _import_seed(self) -> LoadedBundle | None:
        seed = self._seed_path()
        if not (seed / "manifest.json").is_file():
            return None
        metadata = seed / "metadata.json"
        if metadata.is_file():
            log.info("seed export metadata: %s", metadata.read_text(errors="replace").strip())
        try:
            bundle = read_bundle(seed, self.settings.hmac_key)
            models = {name: (bundle.model_files(name), bundle.model_entry(name)) for name in bundle.manifest.models}
            loaded = load_bundle(self.publisher.publish(models, bundle.manifest.meta()), self.spec, nthread=1)
        except BundleError as exc:
            log.error("seed bundle in %s rejected: %s", seed, exc)
            return None
        log.info("imported seed bundle from %s as v%d", seed, loaded.version)
        return loaded

    def _publish_prior(self) -> LoadedBundle:
        prior = fit_prior(self.spec, self.params.served, self.params.alpha)
        bundle = self.publisher.publish(prior, bundle_meta(self.spec, self.params, prior=True))
        log.info("no model yet: published the prior bundle v%d", bundle.version)
        return load_bundle(bundle, self.spec, nthread=1)

    def stop(self) -> None:
        self.loop.stop()
        self.log.close()
        self.lock.release()
