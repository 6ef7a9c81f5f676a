"""Prediction-server settings (contract §7 names, plus ours)."""

from __future__ import annotations

from shared.settings import CommonSettings, env


class PredictorSettings(CommonSettings):
    host: str = env("PREDICT_HOST", "0.0.0.0", "Bind address.")
    port: int = env("PREDICT_PORT", 8001, "Bind port.")
    training_server_url: str = env("TRAINING_SERVER_URL", "http://training-service:8000",
                                   "Trainer to pull bundles from.")
    bundle_dir: str | None = env("LATENCY_BUNDLE_DIR", None,
                                 "Read bundles from this shared directory instead of pulling over HTTP.")
    local_model_dir: str = env("LOCAL_MODEL_DIR", "/tmp/latency-predictor", "Where pulled bundles are kept.")
    model_sync_interval_sec: float = env("MODEL_SYNC_INTERVAL_SEC", 10.0, "Seconds between pulls.", gt=0)
    http_timeout: float = env("HTTP_TIMEOUT", 30.0, "Bundle pull timeout (s).", gt=0)
    download_retries: int = env("DOWNLOAD_RETRIES", 3, "Retries on 502/503/504.", ge=0)
    max_bulk_rows: int = env("LATENCY_MAX_BULK_ROWS", 10_000, "Largest bulk call accepted.", ge=1)
