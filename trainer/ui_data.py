"""The status page's data (``GET /ui/data``; ``GET /ui`` renders the same document as HTML).

Per model: the live model's prequential error now and over time, the retrain history, the live bundle's
entry (configuration chosen, importances, holdout and reference metrics), its physical base and every fit's
base over time (``base``: the document ``shared.charts.coefficients`` renders), and the newest window rows
predicted by the live model at every served quantile (actual vs predicted). Service-wide: bundle, retrain
loop, durable log, window, ingest rate, quarantine and drift-alarm events. CPU-bound (one small batch
prediction per model): call it from the threadpool.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

import numpy as np

from shared.charts.coefficients import base_history
from shared.features import MODEL_NAMES, TARGET_OF
from shared.model import LoadedBundle, entry_base, quantile_key
from shared.timefmt import rfc3339
from trainer.fit import matrix_columns
from trainer.history import RetrainRecord
from trainer.service import TrainerService

RECENT_ROWS = 300
ENTRY_KEYS = ("candidate", "location_rounds", "quantile_rounds", "selection", "selection_metric", "training_rows",
              "holdout_rows", "fit_seconds", "metrics", "reference_metrics", "calibration", "quantiles", "base")


def _recent(service: TrainerService, live: LoadedBundle | None, name: str, n: int) -> dict[str, Any]:
    """The newest ``n`` window rows of ``name``: actual and the live model's prediction per served quantile."""
    rows = service.window.newest(name, n)
    if live is None or not len(rows):
        return {"n": 0, "actual": [], "predicted": {}, "primary": None, "coverage": None}
    model = live.models[name]
    values = live.predict_all(name, matrix_columns(name, rows.data, service.params.tpot_zero_token_count))
    actual = rows.column(TARGET_OF[name])
    primary = values[:, model.primary]
    return {"n": len(rows), "actual": np.round(actual, 4).tolist(),
            "predicted": {quantile_key(q): np.round(values[:, j], 4).tolist() for j, q in enumerate(model.quantiles)},
            "primary": quantile_key(model.quantiles[model.primary]),
            "coverage": float(np.mean(actual <= primary))}


def _entry(live: LoadedBundle | None, name: str) -> dict[str, Any]:
    if live is None:
        return {}
    entry = live.bundle.model_entry(name)
    out = entry.written(*ENTRY_KEYS)
    out["prior"] = entry.prior
    out["importances"] = dict(sorted(entry.importances.items(), key=lambda kv: -kv[1]))
    return out


def _base(live: LoadedBundle | None, name: str, records: list[RetrainRecord]) -> dict[str, Any]:
    """The live entry's base and every recorded fit's (``published``: it became the live model)."""
    base = None if live is None else entry_base(live.bundle.model_entry(name))
    live_doc = None if live is None or base is None else {
        "version": live.version, "coefficients": {t: float(c) for t, c in base.named().items()}, "rows": base.rows,
        "source": base.source}
    series = [{"at": r.at, "version": r.version if r.decision == "published" else None,
               "published": r.decision == "published", "decision": r.decision, "coefficients": r.base.coefficients,
               "rows": r.base.rows, "source": r.base.source} for r in records if r.base is not None]
    return base_history(name, live_doc, series)


def _model(service: TrainerService, live: LoadedBundle | None, name: str, state: dict[str, Any],
           recent: int) -> dict[str, Any]:
    counts = service.window.counts()[name]
    records = service.history.retrains.records(name)
    return {
        "live": state,
        "live_series": [asdict(p) for p in service.history.live.points(name)],
        "retrains": [r.as_dict() for r in records],
        "live_entry": _entry(live, name),
        "base": _base(live, name, records),
        "window": {"train": counts["train"], "holdout": counts["test"], "rows_added": service.window.rows_added(name)},
        "recent": _recent(service, live, name, recent),
    }


def ui_data(service: TrainerService, recent: int = RECENT_ROWS) -> dict[str, Any]:
    s, live = service.settings, service.live.get()
    states = service.prequential.state()
    quarantine = service.quarantine
    return {
        "generated_at": rfc3339(), "now": time.time(),
        "quantile": s.quantile_alpha, "objective": s.objective_type,
        "bundle": None if live is None else {"version": live.version, "prior": live.bundle.manifest.prior,
                                             "created_at": live.bundle.manifest.created_at},
        "retrain": {**service.loop.status.as_dict(), "interval_s": s.retraining_interval_sec,
                    "min_samples": s.min_samples_for_retrain},
        "durable": {"rows": service.log.rows, "bytes": service.log.total_bytes},
        "ingest": {"total": service.history.ingest.total, "bin_s": service.history.ingest.bin_s,
                   "series": [list(p) for p in service.history.ingest.series()]},
        "quarantine": {"held": quarantine.held, "total_held": quarantine.total_held,
                       "released": quarantine.total_released, "factor": s.quarantine_factor},
        "drift": {"band": list(service.prequential.band), "hold_s": s.drift_hold_sec,
                  "events": [asdict(e) for e in service.history.live.events()]},
        "models": {name: _model(service, live, name, states[name], recent) for name in MODEL_NAMES},
    }
