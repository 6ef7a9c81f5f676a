"""``GET /model/export``: a gzip tar of the live bundle (contract §4) for seeding a new trainer.

Members: the bundle's model files (``ttft.ubj``, ``tpot.ubj``), ``manifest.json`` and
``metadata.json`` {model_type, quantile_alpha, exported_at, ttft_samples, tpot_samples}; every
member's mtime is the export time. Unpack into ``<data_dir>/seed`` (or LATENCY_SEED_DIR) of a
trainer with no bundle yet and it imports (and verifies) it at start-up.
"""

from __future__ import annotations

import gzip
import io
import tarfile
import time

import orjson

from shared.timefmt import from_epoch
from trainer.service import TrainerService
from trainer.views import require_live


def _add(tar: tarfile.TarFile, name: str, data: bytes, mtime: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), mtime, 0o644
    tar.addfile(info, io.BytesIO(data))


def export_tar_gz(service: TrainerService) -> bytes:
    loaded = require_live(service)
    now = time.time()
    mtime = int(now)
    counts = service.window.counts()
    metadata = {"model_type": service.settings.model_type, "quantile_alpha": service.settings.quantile_alpha,
                "exported_at": from_epoch(now), "ttft_samples": counts["ttft"]["train"],
                "tpot_samples": counts["tpot"]["train"], "bundle_version": loaded.version}
    raw = io.BytesIO()
    with gzip.GzipFile(fileobj=raw, mode="wb", mtime=mtime) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for name in sorted(loaded.bundle.files):
            _add(tar, name, loaded.bundle.files[name], mtime)
        _add(tar, "manifest.json", loaded.bundle.manifest_bytes, mtime)
        _add(tar, "metadata.json", orjson.dumps(metadata, option=orjson.OPT_INDENT_2), mtime)
    return raw.getvalue()
