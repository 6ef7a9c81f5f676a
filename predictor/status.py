"""JSON bodies of /status, /reload and / (contract §3, plus additive ``bundle``/``sync``/``refused``)."""

from __future__ import annotations

from typing import Any

from predictor.holder import ModelHolder
from predictor.sources import BundleSource
from predictor.sync import SyncResult
from shared.predictor_settings import PredictorSettings
from shared.timefmt import from_epoch

MODEL_KEYS = ("features", "quantiles", "calibration", "training_rows", "holdout_rows", "metrics", "candidate", "base")
"""Keys of each manifest entry ``/status`` echoes under ``bundle.models.<name>`` (those the entry has): the router reads
``candidate`` and ``base`` (the physical base: terms, coefficients, rows, source) for its status page."""


class StatusView:
    def __init__(self, settings: PredictorSettings, holder: ModelHolder, source: BundleSource) -> None:
        self._settings = settings
        self._holder = holder
        self._source = source

    def model_meta(self) -> dict[str, Any]:
        """model_type / objective_type / quantile of the live bundle (settings before the first one)."""
        serving = self._holder.serving
        if serving is None:
            return {"model_type": self._settings.model_type, "objective_type": self._settings.objective_type,
                    "quantile": self._settings.quantile_alpha}
        return {"model_type": serving.model_type, "objective_type": serving.objective_type,
                "quantile": serving.quantile}

    def _bundle(self) -> dict[str, Any] | None:
        serving = self._holder.serving
        if serving is None:
            return None
        manifest = serving.loaded.bundle.manifest
        return {
            "version": serving.version, "prior": serving.prior, "created_at": manifest.created_at,
            "loaded_at": serving.last_model_load, "source": serving.source,
            "feature_flags": serving.loaded.spec.as_dict(),
            "feature_spec_version": manifest.feature_spec_version,
            "evaluator": dict(serving.evaluator), "forest_from": dict(serving.forest_from),
            "models": {name: entry.written(*MODEL_KEYS) for name, entry in manifest.models.items()},
        }

    def _sync(self) -> dict[str, Any]:
        h, s = self._holder, self._settings
        return {
            "source": self._source.location, "mode": "bundle_dir" if s.bundle_dir else "http_pull",
            "interval_sec": s.model_sync_interval_sec, "long_poll": s.long_poll,
            "last_success": None if h.last_sync_ok is None else from_epoch(h.last_sync_ok),
            "seconds_since_success": round(h.seconds_since_sync(), 3), "last_error": h.last_sync_error,
            "failures_total": h.sync_failures_total, "swaps_total": h.swaps_total,
        }

    def status(self) -> dict[str, Any]:
        serving = self._holder.serving
        ready = serving is not None
        models_exist = {"ttft_model": ready, "tpot_model": ready}
        if self._settings.ensemble_mode:
            models_exist.update(ttft_gated=False, tpot_gated=False)
        return {
            "is_ready": ready, **self.model_meta(),
            "last_model_load": serving.last_model_load if serving else None,
            "training_server_url": self._source.location, "models_exist": models_exist,
            "ensemble_active": False, "bundle": self._bundle(), "sync": self._sync(),
            "refused": [r.as_dict() for r in list(self._holder.refusals)],
            "refused_total": self._holder.refused_total,
        }

    def reload(self, result: SyncResult) -> dict[str, Any]:
        serving = self._holder.serving
        return {
            "synced": result.synced, "loaded": serving is not None, "is_ready": serving is not None,
            **self.model_meta(), "last_load_time": serving.last_model_load if serving else None,
            "swapped": result.swapped, "version": serving.version if serving else None, "error": result.error,
        }

    def root(self) -> dict[str, Any]:
        return {
            "message": "HTTP-based Latency Predictor is running", **self.model_meta(),
            "is_ready": self._holder.serving is not None,
            "sync_interval": int(self._settings.model_sync_interval_sec), "training_server": self._source.location,
        }
