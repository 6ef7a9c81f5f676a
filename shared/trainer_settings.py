"""Training-server settings (contract §7 names, plus ours)."""

from __future__ import annotations

from pydantic import field_validator

from shared.candidates import LOSSES, Candidate, parse_candidates, parse_models, parse_served
from shared.features import MODEL_NAMES
from shared.settings import CommonSettings, Flag, env


class TrainerSettings(CommonSettings):
    host: str = env("TRAINING_HOST", "0.0.0.0", "Bind address.")
    port: int = env("TRAINING_PORT", 8000, "Bind port.")
    data_dir: str = env("LATENCY_DATA_DIR", "/tmp/latency-trainer", "Durable sample log and bundles live here.")
    retraining_interval_sec: float = env("LATENCY_RETRAINING_INTERVAL_SEC", 10.0, "Seconds between retrains.",
                                         gt=0)
    min_samples_for_retrain: int = env("LATENCY_MIN_SAMPLES_FOR_RETRAIN", 100, "Rows from which the trees are "
                                       "fitted on top of the physical base.", ge=1)
    min_samples_for_retrain_fresh: int = env(
        "LATENCY_MIN_SAMPLES_FOR_RETRAIN_FRESH", 5, "Rows from which a model is retrained at all (at least 3): below "
        "LATENCY_MIN_SAMPLES_FOR_RETRAIN only its physical base (level and shape) is refitted, calibrated on "
        "cross-validated residuals.", ge=2)
    max_training_data_size_per_bucket: int = env("LATENCY_MAX_TRAINING_DATA_SIZE_PER_BUCKET", 10_000,
                                                 "Most rows kept per (queue, cache, prefix) bucket and model.", ge=1)
    test_train_ratio: float = env("LATENCY_TEST_TRAIN_RATIO", 0.1, "Share of newest rows held out.", gt=0, lt=1)
    max_test_data_size: int = env("LATENCY_MAX_TEST_DATA_SIZE", 2000, "Held-out rows kept per model.", ge=10)
    tpot_zero_token_count: Flag = env("LATENCY_TPOT_ZERO_TOKEN_COUNT", True,
                                      "Zero num_tokens_generated in TPOT training.")
    sample_weighting_for_prefix_cache: Flag = env("LATENCY_SAMPLE_WEIGHTING_FOR_PREFIX_CACHE", False,
                                                  "Inverse-frequency weights by prefix bucket.")
    min_samples_for_ensemble_split: int = env("LATENCY_MIN_SAMPLES_FOR_ENSEMBLE_SPLIT", 200,
                                              "Reported for compatibility.")
    retention_max_rows: int = env("LATENCY_RETENTION_MAX_ROWS", 2_000_000, "Rows kept in the durable log.",
                                  ge=1000)
    retention_max_bytes: int = env("LATENCY_RETENTION_MAX_BYTES", 1 << 30, "Bytes kept in the durable log.",
                                   ge=1 << 20)
    segment_max_bytes: int = env("LATENCY_SEGMENT_MAX_BYTES", 64 << 20, "Log segment size before rolling.",
                                 ge=1 << 16)
    xgb_n_estimators: int = env("LATENCY_XGB_N_ESTIMATORS", 300, "Most boosting rounds per booster (location and "
                                "quantile); early stopping on the stratified stop rows usually ends sooner.", ge=1)
    xgb_learning_rate: float = env("LATENCY_XGB_LEARNING_RATE", 0.1, "Shrinkage.", gt=0)
    xgb_max_bin: int = env("LATENCY_XGB_MAX_BIN", 128, "Histogram bins per feature (hist tree method).", ge=2)
    fit_candidates: str = env(
        "LATENCY_FIT_CANDIDATES", "depth6,depth4-window", "Tree configurations fitted every "
        "cycle (depth<N>: trees on top of the physical base; depth<N>-window: trees learn the whole latency inside "
        "the training window, the base adds its growth past it); the lowest MAE (ms) of the location on the newest "
        "rows wins, the base alone included. Every one is monotone: TTFT non-decreasing in input/effective tokens, "
        "prefill tokens in flight and queue; TPOT in running requests, decode tokens in flight and KV usage (a "
        "-monotone suffix is accepted, same meaning).")
    served_quantiles: str = env(
        "LATENCY_SERVED_QUANTILES", "0.5,0.9,0.99", "Quantiles every bundle serves (LATENCY_QUANTILE_ALPHA is "
        "added; it answers the contract fields); ?quantiles= on the predictor picks among them.")
    window_max_rows: int = env(
        "LATENCY_WINDOW_MAX_ROWS", 100_000, "Training rows kept per model (water-filled over the buckets: the "
        "most crowded buckets give up their oldest rows first).", ge=100)
    fit_quantile_rows: int = env("LATENCY_FIT_QUANTILE_ROWS", 20_000, "Rows the quantile booster is fitted on "
                                 "(a subsample of the window): the main lever on the fit time.", ge=100)
    fit_budget_sec: float = env(
        "LATENCY_FIT_BUDGET_SEC", 2.5, "Wall seconds one model's fit may take: a fit over it makes the next one fit "
        "the location boosters on fewer rows (every candidate is still fitted); fits well under it let the rows "
        "grow back to the whole window (0: off, always every row).", ge=0)
    fit_min_location_rows: int = env("LATENCY_FIT_MIN_LOCATION_ROWS", 20_000, "The fit budget never cuts the "
                                     "location boosters' rows below this.", ge=100)
    early_stopping_rounds: int = env("LATENCY_EARLY_STOPPING_ROUNDS", 15, "Rounds without improvement on the "
                                     "stop rows before a booster stops.", ge=1)
    recency_half_life_sec: float = env("LATENCY_RECENCY_HALF_LIFE_SEC", 300.0, "Rows this much older than the "
                                       "newest weigh half as much in the fit (0: no recency weighting) ...", ge=0)
    recency_floor: float = env("LATENCY_RECENCY_FLOOR", 0.25, "... but never less than this.", ge=0, le=1)
    publish_shift_bound: float = env(
        "LATENCY_PUBLISH_SHIFT_BOUND", 1.5, "A challenger that moves the primary quantile on the probe grid by more "
        "than this factor (median) is published only when the shift persists (two cycles, fresh rows agree).",
        gt=1)
    fit_nice: int = env("LATENCY_FIT_NICE", 10, "The retrain loop and its fit threads run this much nicer than the "
                        "rest of the trainer (Linux; 0: same priority), so a fit does not take the CPU from "
                        "serving on the same cores.", ge=0, le=19)
    calibration_adapt_rate: float = env(
        "LATENCY_CALIBRATION_ADAPT_RATE", 0.2, "Adaptive conformal calibration: after each cycle the primary "
        "quantile's calibration level moves by this × (target − the live model's coverage on the rows that arrived "
        "since the previous cycle), within [target − 0.1, target + 0.9 × (1 − target)] (0: always the target).",
        ge=0, le=1)
    base_prior_rows: float = env(
        "LATENCY_BASE_PRIOR_ROWS", 20.0, "The physical base's shape is shrunk toward the live model's (at first the "
        "prior's) as if this many rows agreed with it; its level is learnt freely from the first rows (0: no "
        "shrinkage).", ge=0)
    spread_prior_rows: int = env(
        "LATENCY_SPREAD_PRIOR_ROWS", 50, "While rows are few each quantile above the median keeps at least the prior's "
        "spread above it (p90 = 1.3 x the median), weighted by this / (rows + this): 0.6 at 30 rows, 0.2 at 200 "
        "(0: no floor).", ge=0)
    base_loss: str = env(
        "LATENCY_BASE_LOSS", "l2", "How the physical base is fitted in log space: l2 (least squares) or l1 (least "
        "absolute error: a burst of slow rows pulls it less).")
    thin_empirical_quantile: str = env(
        "LATENCY_THIN_EMPIRICAL_QUANTILE", "tpot", "Models (comma-separated: ttft, tpot; empty: none) whose fits on "
        "fewer rows than the trees need take each quantile as the plain quantile of their residuals while the "
        "conformal rank would be the largest residual (p90: under 19 rows), so one outlier cannot set it.")
    publish_shift_min_rows: int = env(
        "LATENCY_PUBLISH_SHIFT_MIN_ROWS", 1000, "The shift bound protects only a live model trained on at least this "
        "many rows (a younger one extrapolates over most of the probe grid; a challenger still has to score and cover "
        "as well on the newest rows).", ge=0)

    @field_validator("base_loss")
    @classmethod
    def _loss(cls, value: str) -> str:
        if value not in LOSSES:
            raise ValueError(f"LATENCY_BASE_LOSS must be one of {', '.join(LOSSES)}, got {value!r}")
        return value

    @field_validator("thin_empirical_quantile")
    @classmethod
    def _thin(cls, value: str) -> str:
        parse_models(value, MODEL_NAMES)
        return value

    @property
    def thin_empirical(self) -> tuple[str, ...]:
        return parse_models(self.thin_empirical_quantile, MODEL_NAMES)

    @field_validator("fit_candidates")
    @classmethod
    def _candidates(cls, value: str) -> str:
        parse_candidates(value)
        return value

    @field_validator("served_quantiles")
    @classmethod
    def _quantiles(cls, value: str) -> str:
        parse_served(value)
        return value

    @property
    def candidates(self) -> tuple[Candidate, ...]:
        return parse_candidates(self.fit_candidates)

    @property
    def quantiles(self) -> tuple[float, ...]:
        return tuple(sorted(set(parse_served(self.served_quantiles)) | {self.quantile_alpha}))
    max_ingest_rows: int = env("LATENCY_MAX_INGEST_ROWS", 100_000,
                               "Largest /add_training_data_bulk call accepted (rows); the contract needs >= 20,000.",
                               ge=20_000)
    seed_dir: str | None = env("LATENCY_SEED_DIR", None,
                               "Directory with an unpacked /model/export (manifest.json + *.ubj) imported as the "
                               "first bundle when the data dir has none (default: <data_dir>/seed).")
    train_threads: int = env("LATENCY_TRAIN_THREADS", 2, "Threads for XGBoost fitting; TTFT and TPOT are fitted "
                             "concurrently with max(1, threads // 2) XGBoost threads each.", ge=1)
    bundles_kept: int = env("LATENCY_BUNDLES_KEPT", 5, "Published bundle versions kept on disk.", ge=2)
    quarantine_factor: float = env(
        "LATENCY_QUARANTINE_FACTOR", 20.0, "A row whose TTFT or TPOT exceeds this × the live model's p99 for its "
        "features is stored but kept out of training (quarantined); 0 disables.", ge=0)
    quarantine_min_sources: int = env(
        "LATENCY_QUARANTINE_MIN_SOURCES", 2, "Quarantined rows are released into training only when they come from "
        "at least this many clients (peer addresses) ... ", ge=1)
    quarantine_sustain_intervals: int = env(
        "LATENCY_QUARANTINE_SUSTAIN_INTERVALS", 3, "... and were the majority of incoming rows in this many "
        "consecutive intervals.", ge=1)
    quarantine_interval_sec: float = env("LATENCY_QUARANTINE_INTERVAL_SEC", 10.0,
                                         "Length of one quarantine counting interval (0: every ingest call).", ge=0)
    prequential_window: int = env("LATENCY_PREQUENTIAL_WINDOW", 2000, "Newest incoming rows over which the live "
                                  "model's coverage and pinball are measured (per model).", ge=10)
    drift_band_low: float = env("LATENCY_DRIFT_BAND_LOW", 0.80, "Drift alarm: live coverage below this ...",
                                gt=0, lt=1)
    drift_band_high: float = env("LATENCY_DRIFT_BAND_HIGH", 0.97, "... or above this ...", gt=0, le=1)
    drift_hold_sec: float = env("LATENCY_DRIFT_HOLD_SEC", 60.0, "... for this long raises the alarm "
                                "(trainer_drift_alarm, one log line).", ge=0)
    max_ingest_bytes: int = env(
        "LATENCY_MAX_INGEST_BYTES", 40 << 20, "Largest /add_training_data_bulk body (bytes); 413 above it, before "
        "anything is read (a chunked body is cut off there, so memory grows by at most this). 100,000 router rows "
        "take ~35 MB.", ge=1 << 20)
    idempotency_keys: int = env(
        "LATENCY_IDEMPOTENCY_KEYS", 10_000, "Idempotency-Key values of stored ingest batches remembered (newest "
        "first); a retry within the window is acknowledged again without storing. 0 disables.", ge=0)
    idempotency_ttl_sec: float = env(
        "LATENCY_IDEMPOTENCY_TTL_SEC", 86_400.0, "How long an ingest Idempotency-Key is remembered (s).", gt=0)
