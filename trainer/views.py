"""JSON bodies of the read-only contract endpoints (contract §4), built from the service state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from shared.bundle import version_dir
from shared.errors import NotFound, NotReady
from shared.features import MODEL_NAMES
from shared.model import LoadedBundle
from shared.timefmt import from_epoch, rfc3339
from trainer.compat_metrics import PREFIX_RANGES
from trainer.service import TrainerService
from trainer.window import bucket_triplet

ALL_MODEL_NAMES = ("ttft", "tpot", "ttft_scaler", "tpot_scaler", "ttft_gated", "tpot_gated")


def _kind(service: TrainerService) -> dict[str, Any]:
    s = service.settings
    return {"model_type": s.model_type, "objective_type": s.objective_type, "quantile": s.quantile_alpha}


def require_live(service: TrainerService) -> LoadedBundle:
    loaded = service.live.get()
    if loaded is None:
        raise NotReady("Models are not ready.")
    return loaded


def root(service: TrainerService) -> dict[str, Any]:
    s = service.settings
    description = ("Predicting mean TTFT and TPOT latencies" if s.objective_type == "mean" else
                   f"Predicting {s.quantile_alpha * 100:.0f}% quantile for TTFT and TPOT latencies")
    return {"message": "Latency Predictor is running.", **_kind(service), "description": description}


def readyz(service: TrainerService) -> dict[str, Any]:
    loaded = require_live(service)
    return {"status": "ready", "bundle_version": loaded.version, "retrain": service.loop.status.as_dict()}


def artifact_path(service: TrainerService, name: str) -> Path:
    """Path of the live artifact of ``name``; 404 with the contract's messages otherwise."""
    if name not in ALL_MODEL_NAMES:
        raise NotFound(f"Unknown model: {name}")
    loaded = service.live.get()
    if name not in MODEL_NAMES or loaded is None:
        raise NotFound(f"Model {name} not found")
    path = version_dir(service.publisher.root, loaded.version) / loaded.bundle.model_entry(name).file
    if not path.is_file():
        raise NotFound(f"Model {name} not found")
    return path


def model_info(service: TrainerService, name: str) -> dict[str, Any]:
    path = artifact_path(service, name)
    stat = path.stat()
    return {"model_name": name, "path": str(path), "size_bytes": stat.st_size,
            "last_modified": from_epoch(stat.st_mtime), "exists": True, "model_type": service.settings.model_type,
            "quantile": service.settings.quantile_alpha, "bundle_version": service.live.version,
            "format": "xgboost-ubj"}


def models_list(service: TrainerService) -> dict[str, Any]:
    q = service.settings.quantile_alpha
    models: dict[str, Any] = {}
    for name in ALL_MODEL_NAMES:
        try:
            stat = artifact_path(service, name).stat()
            models[name] = {"exists": True, "size_bytes": stat.st_size, "last_modified": from_epoch(stat.st_mtime)}
        except NotFound:
            models[name] = {"exists": False, "size_bytes": 0, "last_modified": None}
    return {"models": models, "model_type": service.settings.model_type, "quantile": q, "server_time": rfc3339(),
            "evaluation_metrics": {"quantile_loss": "Lower is better", "coverage_percent": f"Target: {q * 100:.1f}%",
                                   "violation_rate_percent": f"Target: {(1 - q) * 100:.1f}%"}}


def download_info(service: TrainerService) -> dict[str, Any]:
    loaded = service.live.get()
    q = service.settings.quantile_alpha
    bundle: dict[str, Any] = {"manifest": "/bundle/manifest", "version": None, "base_score": {}}
    if loaded is not None:
        entries = {n: loaded.bundle.model_entry(n) for n in MODEL_NAMES}
        bundle.update(version=loaded.version, created_at=loaded.bundle.manifest.created_at,
                      base_score={n: e.base_score for n, e in entries.items()},
                      calibration={n: e.calibration.written() if e.calibration else None for n, e in entries.items()})
    return {**_kind(service),
            "available_endpoints": {"trees": {"ttft_trees": "/model/ttft/xgb/json",
                                              "tpot_trees": "/model/tpot/xgb/json"}},
            "model_status": {"ttft_model_ready": loaded is not None, "tpot_model_ready": loaded is not None},
            "evaluation_info": {"quantile_loss": "Pinball loss at the target quantile on the newest held-out rows",
                                "coverage_percent": f"Share of held-out rows at or below the prediction (target "
                                                    f"{q * 100:.1f}%)",
                                "violation_rate_percent": f"100 - coverage_percent (target {(1 - q) * 100:.1f}%)"},
            "bundle": bundle}


def data_status(service: TrainerService) -> dict[str, Any]:
    counts = service.window.counts()
    s = service.settings
    ttft_buckets = service.window.bucket_counts("ttft")
    distribution = {"queue_{}_cache_{}_prefix_{}".format(*bucket_triplet(b)): int(n)
                    for b, n in enumerate(ttft_buckets) if n > 0}

    def part(key: str) -> dict[str, int]:
        ttft, tpot = counts["ttft"][key], counts["tpot"][key]
        return {"ttft_samples": ttft, "tpot_samples": tpot, "total_samples": ttft + tpot}

    return {"training_data": part("train"), "test_data": part("test"),
            "ensemble": {"ensemble_mode": s.ensemble_mode, "ensemble_active": False,
                         "min_samples_for_split": s.min_samples_for_ensemble_split,
                         **{f"{m}_{k}_samples": counts[m][k] for m in MODEL_NAMES for k in ("noqueue", "queued")}},
            "metrics": {f"{m}_scores_count": len(service.metrics.history[m]) for m in MODEL_NAMES},
            "bucket_distribution": distribution, "model_ready": service.live.get() is not None,
            "last_retrain": service.loop.status.last_retrain,
            "durable": {"rows": service.log.rows, "bytes": service.log.total_bytes}}


def prefix_distribution(service: TrainerService) -> dict[str, Any]:
    """Diagnostic (contract §4, unused by clients): TTFT statistics per prefix-score range."""
    train, _ = service.window.snapshot("ttft")
    if len(train) == 0:
        return {"error": "No training samples available"}
    ttft, bucket = train.column("actual_ttft_ms"), train.bucket % 4
    ranges: dict[str, Any] = {}
    for p, label in enumerate(PREFIX_RANGES):
        values = ttft[bucket == p]
        ranges[label] = {"count": int(len(values))} | ({} if not len(values) else {
            "avg_ttft_ms": float(np.mean(values)), "median_ttft_ms": float(np.median(values)),
            "p90_ttft_ms": float(np.quantile(values, 0.9))})
    return {"total_samples": int(len(train)), "prefix_ranges": ranges}
