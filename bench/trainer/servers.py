"""A trainer + predictor pair of one source tree on loopback, for the extrapolation benchmark.

``Pair`` starts ``python -m trainer`` and ``python -m predictor`` of a tree (this checkout or a ``git worktree`` of
another revision: ``PYTHONPATH`` and ``cwd`` are the tree, the interpreter is this one) with a fresh data dir,
posts training rows in bulk, waits until the predictor serves a bundle trained on them, and asks it for p90s.
Both models need every posted row before they are fitted (``LATENCY_MIN_SAMPLES_FOR_RETRAIN``), so the first fit
sees the whole training window. Every child is stopped when the ``with`` block ends.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from demo.procs import LOOPBACK, ProcessSet, free_port
from shared.features import MODEL_NAMES

POST_CHUNK = 2000
PREDICT_CHUNK = 2000


@dataclass(frozen=True)
class Tree:
    """A source tree whose trainer and predictor are measured (``name``: "checkout" or the revision asked for)."""

    name: str
    root: Path
    commit: str


@dataclass(frozen=True)
class PairSettings:
    retrain_interval_s: float = 2.0
    startup_timeout_s: float = 60.0
    trained_timeout_s: float = 240.0
    train_threads: int = 2


@dataclass(frozen=True)
class Served:
    """What the predictor serves once training is over: bundle version and rows per model (0: still the prior's)."""

    version: int
    rows: dict[str, int]
    waited_s: float
    candidates: dict[str, str] = field(default_factory=dict)
    """Per model the configuration served (``base``, ``depth6``, ``depth4-window``, …; older trees: empty)."""


class TrainingTimeout(RuntimeError):
    """No trained bundle reached the predictor in time (message carries the trainer's log tail)."""


class Pair:
    def __init__(self, tree: Tree, workdir: Path, settings: PairSettings) -> None:
        self.tree, self.workdir, self.settings = tree, workdir, settings
        self.procs = ProcessSet(workdir / "logs", cwd=tree.root)
        self.trainer_url = f"http://{LOOPBACK}:{free_port()}"
        self.predictor_url = f"http://{LOOPBACK}:{free_port()}"
        self.client = httpx.Client(timeout=60.0)

    def __enter__(self) -> Pair:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.client.close()
        self.procs.stop_all()

    def start(self, rows_per_model: int) -> None:
        """Start both servers (fits wait for ``rows_per_model`` rows of each model) and wait until they are ready."""
        s = self.settings
        base = {"PYTHONPATH": str(self.tree.root), "OMP_NUM_THREADS": "1"}
        trainer_env = {**base, "LATENCY_RETRAINING_INTERVAL_SEC": str(s.retrain_interval_s),
                       "LATENCY_MIN_SAMPLES_FOR_RETRAIN": str(rows_per_model),
                       "LATENCY_MIN_SAMPLES_FOR_RETRAIN_FRESH": str(rows_per_model),
                       "LATENCY_TRAIN_THREADS": str(s.train_threads)}
        self.procs.start("trainer", [sys.executable, "-m", "trainer", "--host", LOOPBACK, "--port",
                                     self.trainer_url.rsplit(":", 1)[1], "--data-dir", str(self.workdir / "trainer")],
                         trainer_env, health_urls=[self.trainer_url + "/readyz"])
        predictor_env = {**base, "LOCAL_MODEL_DIR": str(self.workdir / "predictor")}
        self.procs.start("predictor", [sys.executable, "-m", "predictor", "--host", LOOPBACK, "--port",
                                       self.predictor_url.rsplit(":", 1)[1], "--training-url", self.trainer_url],
                         predictor_env, health_urls=[self.predictor_url + "/readyz"])
        self.procs.wait_healthy(s.startup_timeout_s)

    def post(self, rows: Sequence[dict[str, Any]]) -> None:
        for i in range(0, len(rows), POST_CHUNK):
            response = self.client.post(self.trainer_url + "/add_training_data_bulk",
                                        json={"entries": list(rows[i:i + POST_CHUNK])})
            response.raise_for_status()

    def wait_trained(self, rows: Mapping[str, int]) -> Served:
        """Poll until the predictor serves a bundle whose models were trained on ``rows`` rows each, or (a model
        refused by the trainer) until two cycles started after the rows arrived and the predictor serves the
        trainer's live bundle."""
        started = time.monotonic()
        posted_cycles = self._trainer_ready()["retrain"]["cycles"]
        while True:
            bundle = self.client.get(self.predictor_url + "/status").json()["bundle"]
            trained = {m: _rows_of(bundle, m) for m in MODEL_NAMES}
            ready = self._trainer_ready()
            settled = ready["retrain"]["cycles"] >= posted_cycles + 2 and ready["bundle_version"] == bundle["version"]
            if all(trained[m] >= rows[m] for m in rows) or settled:
                chosen = {m: str(bundle["models"][m].get("candidate", "")) for m in MODEL_NAMES}
                return Served(int(bundle["version"]), trained, round(time.monotonic() - started, 1), chosen)
            if time.monotonic() - started > self.settings.trained_timeout_s:
                raise TrainingTimeout(f"{self.tree.name}: no trained bundle after {self.settings.trained_timeout_s:.0f}"
                                      f" s (serving {trained}, trainer {ready})\n"
                                      f"{self.procs.children['trainer'].log_tail()}")
            time.sleep(0.2)

    def predict(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for i in range(0, len(rows), PREDICT_CHUNK):
            response = self.client.post(self.predictor_url + "/predict/bulk/strict",
                                        json={"requests": list(rows[i:i + PREDICT_CHUNK])})
            response.raise_for_status()
            out.extend(response.json()["predictions"])
        return out

    def _trainer_ready(self) -> dict[str, Any]:
        response = self.client.get(self.trainer_url + "/readyz")
        response.raise_for_status()
        return dict(response.json())


def _rows_of(bundle: Mapping[str, Any], model: str) -> int:
    entry = bundle["models"][model]
    return int(entry["training_rows"]) + int(entry["holdout_rows"])
