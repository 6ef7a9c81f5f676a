"""Replay outputs: per-request CSV, training-sample CSV, bulk POST to a trainer, TTFT CDF plot."""

from __future__ import annotations

import csv
import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx

from sim.cluster.policy import TRAINING_FIELDS
from sim.cluster.simulation import RequestRecord
from sim.engine.errors import SimError


class TrainerUploadError(SimError):
    """The trainer did not answer 202 to a bulk upload."""


def write_requests_csv(path: Path, records: Sequence[RequestRecord], policy: str) -> None:
    names = ["policy"] + [f.name for f in dataclasses.fields(RequestRecord)]
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(names)
        for r in records:
            w.writerow([policy, *dataclasses.astuple(r)])


def write_samples_csv(path: Path, samples: Sequence[Mapping[str, float | int | str]]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(TRAINING_FIELDS))
        w.writeheader()
        for s in samples:
            w.writerow({k: s[k] for k in TRAINING_FIELDS})


def post_samples(
    url: str, samples: Sequence[Mapping[str, float | int | str]], batch: int = 5000, timeout_s: float = 30.0,
    token: str | None = None,
) -> int:
    """POST ``{"entries": [...]}`` to ``{url}/add_training_data_bulk`` in batches (each with an Idempotency-Key,
    and ``Authorization: Bearer <token>`` when given); returns rows sent."""
    endpoint = url.rstrip("/") + "/add_training_data_bulk"
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    sent = 0
    with httpx.Client(timeout=timeout_s) as client:
        for i in range(0, len(samples), batch):
            chunk = [{k: s[k] for k in TRAINING_FIELDS} for s in samples[i : i + batch]]
            try:
                resp = client.post(endpoint, json={"entries": chunk},
                                   headers={**auth, "Idempotency-Key": uuid.uuid4().hex})
            except httpx.HTTPError as exc:
                raise TrainerUploadError(f"POST {endpoint} failed: {exc}") from exc
            if resp.status_code != 202:
                raise TrainerUploadError(f"POST {endpoint} -> {resp.status_code}: {resp.text[:200]}")
            sent += len(chunk)
    return sent


def plot_ttft_cdf(path: Path, ttfts: Mapping[str, Sequence[float]], title: str = "") -> None:
    """One TTFT CDF line per policy (log-x), written as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, values in ttfts.items():
        if not values:
            continue
        xs = np.sort(np.asarray(values, dtype=np.float64))
        ys = np.arange(1, len(xs) + 1) / len(xs)
        ax.plot(np.maximum(xs, 1e-3), ys, label=name)
    ax.set_xscale("log")
    ax.set_xlabel("TTFT (ms)")
    ax.set_ylabel("CDF")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    ax.set_title(title or "TTFT CDF per policy")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
