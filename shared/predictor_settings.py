"""Prediction-server settings (contract §7 names, plus ours).

``PREDICT_EVALUATOR``, ``PREDICT_NATIVE_MAX_ROWS`` and ``PREDICT_XGB_NTHREAD`` are gone with XGBoost (issue 22): every
model is evaluated by the numpy forest; a deployment that still sets them starts as before (unknown names are
ignored) and gets the same numbers.
"""

from __future__ import annotations

from shared.settings import CommonSettings, Flag, env


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
    max_bulk_bytes: int = env(
        "PREDICT_MAX_BULK_BYTES", 16 << 20, "Largest /predict/bulk(/strict) body (bytes); 413 above it, before "
        "anything is read. 10,000 rows take ~3 MB.", ge=1 << 16)
    long_poll: Flag = env(
        "PREDICT_LONG_POLL", True, "Also hold a long-poll (`wait_s`) on the trainer's manifest (or watch CURRENT "
        "of the bundle dir) so a new bundle is served within ~1 s instead of at the next periodic sync.")
    long_poll_wait_sec: float = env(
        "PREDICT_LONG_POLL_WAIT_SEC", 20.0, "How long one long-poll request is held by the trainer (≤ 30).",
        gt=0, le=30)
    dir_watch_interval_sec: float = env(
        "PREDICT_DIR_WATCH_INTERVAL_SEC", 0.25, "Bundle-dir mode: how often the long-poll loop re-reads CURRENT.",
        gt=0)
    inline_max_bytes: int = env(
        "PREDICT_INLINE_MAX_BYTES", 65_536, "Request bodies up to this size are predicted on the event loop "
        "(sub-millisecond work, a thread hop costs more); larger ones run in the threadpool. 0 = always thread.",
        ge=0)
    keep_local_bundles: int = env("PREDICT_KEEP_LOCAL_BUNDLES", 2, "Pulled bundle versions kept on disk.", ge=1)
    refusals_kept: int = env("PREDICT_REFUSALS_KEPT", 20, "Refused bundles listed in /status.", ge=1)
