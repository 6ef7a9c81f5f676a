"""Training-server settings (contract §7 names, plus ours)."""

from __future__ import annotations

from shared.settings import CommonSettings, Flag, env


class TrainerSettings(CommonSettings):
    host: str = env("TRAINING_HOST", "0.0.0.0", "Bind address.")
    port: int = env("TRAINING_PORT", 8000, "Bind port.")
    data_dir: str = env("LATENCY_DATA_DIR", "/tmp/latency-trainer", "Durable sample log and bundles live here.")
    retraining_interval_sec: float = env("LATENCY_RETRAINING_INTERVAL_SEC", 10.0, "Seconds between retrains.",
                                         gt=0)
    min_samples_for_retrain: int = env("LATENCY_MIN_SAMPLES_FOR_RETRAIN", 100, "Rows needed to retrain.", ge=1)
    min_samples_for_retrain_fresh: int = env("LATENCY_MIN_SAMPLES_FOR_RETRAIN_FRESH", 10,
                                             "Threshold after a bootstrap start.", ge=1)
    max_training_data_size_per_bucket: int = env("LATENCY_MAX_TRAINING_DATA_SIZE_PER_BUCKET", 500,
                                                 "Rows kept per (queue, cache, prefix) bucket and model.", ge=1)
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
    xgb_n_estimators: int = env("LATENCY_XGB_N_ESTIMATORS", 200, "Boosting rounds per model.", ge=1)
    xgb_max_depth: int = env("LATENCY_XGB_MAX_DEPTH", 3, "Tree depth (shallow trees: latency is close to additive "
                             "in the features; deeper trees overfit the quantile at 20k rows).", ge=1)
    xgb_learning_rate: float = env("LATENCY_XGB_LEARNING_RATE", 0.15, "Shrinkage.", gt=0)
    xgb_max_bin: int = env("LATENCY_XGB_MAX_BIN", 128, "Histogram bins per feature (hist tree method).", ge=2)
    xgb_monotone: Flag = env("LATENCY_XGB_MONOTONE", True,
                             "Monotone constraints: TTFT non-decreasing in input/effective tokens, prefill tokens "
                             "in flight and queue; TPOT in running requests, decode tokens in flight and KV usage.")
    max_ingest_rows: int = env("LATENCY_MAX_INGEST_ROWS", 100_000,
                               "Largest /add_training_data_bulk call accepted (rows); the contract needs >= 20,000.",
                               ge=20_000)
    seed_dir: str | None = env("LATENCY_SEED_DIR", None,
                               "Directory with an unpacked /model/export (manifest.json + *.ubj) imported as the "
                               "first bundle when the data dir has none (default: <data_dir>/seed).")
    train_threads: int = env("LATENCY_TRAIN_THREADS", 2, "Threads for XGBoost fitting; TTFT and TPOT are fitted "
                             "concurrently with max(1, threads // 2) XGBoost threads each.", ge=1)
    bundles_kept: int = env("LATENCY_BUNDLES_KEPT", 5, "Published bundle versions kept on disk.", ge=2)
    max_ingest_bytes: int = env(
        "LATENCY_MAX_INGEST_BYTES", 40 << 20, "Largest /add_training_data_bulk body (bytes); 413 above it, before "
        "anything is read (a chunked body is cut off there, so memory grows by at most this). 100,000 router rows "
        "take ~35 MB.", ge=1 << 20)
    idempotency_keys: int = env(
        "LATENCY_IDEMPOTENCY_KEYS", 10_000, "Idempotency-Key values of stored ingest batches remembered (newest "
        "first); a retry within the window is acknowledged again without storing. 0 disables.", ge=0)
    idempotency_ttl_sec: float = env(
        "LATENCY_IDEMPOTENCY_TTL_SEC", 86_400.0, "How long an ingest Idempotency-Key is remembered (s).", gt=0)
