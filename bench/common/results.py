"""One envelope for the JSON result files of every benchmark.

    {"benchmark", "settings", "machine": {"cores", "cpu_model", "python", "xgboost"}, "commit", "dirty", "date",
     "load_avg_before", "load_avg_after", "wall_s", "figures"}

``settings`` is what the run was asked to do (its arguments, resolved), ``figures`` what it measured (any JSON the
benchmark defines). ``commit`` / ``dirty`` are this checkout's HEAD and whether tracked files differed from it at the
start (the figures then measure uncommitted code); ``date`` is the start (ISO 8601, local time with its offset),
``load_avg_*`` the 1/5/15-minute load averages at the start and when the file was written, ``wall_s`` the seconds in
between. Use::

    with results.run("routing-matrix") as run:
        ...                                          # measure
        run.write(path, settings, figures)           # may be called again as figures grow (partial results)

Readers that also take files written before the envelope use :func:`figures` (the envelope's ``figures``, or the
whole document of an older file).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.common.paths import REPO

KEYS = ("benchmark", "settings", "machine", "commit", "dirty", "date", "load_avg_before", "load_avg_after", "wall_s",
        "figures")


def load_avg() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def xgboost_version() -> str | None:
    """The installed XGBoost (either distribution: ``xgboost-cpu`` is the project's), without importing it."""
    for dist in ("xgboost-cpu", "xgboost"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def machine() -> dict[str, Any]:
    return {"cores": os.cpu_count(), "cpu_model": cpu_model(), "python": platform.python_version(),
            "xgboost": xgboost_version()}


def _git(*args: str) -> str | None:
    """Read-only git in this checkout (``GIT_OPTIONAL_LOCKS=0``: ``status`` does not refresh the index)."""
    try:
        done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True,
                              env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip()


def git_state() -> tuple[str | None, bool | None]:
    """(HEAD, whether tracked files differ from it); ``None`` outside a git checkout."""
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    return commit, None if status is None else bool(status)


class Run:
    """One benchmark run: what the envelope records at its start (date, load, commit) and at each write."""

    def __init__(self, benchmark: str) -> None:
        self.benchmark = benchmark
        self.date = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        self.load_avg_before = load_avg()
        self.commit, self.dirty = git_state()
        self.machine = machine()
        self._t0 = time.perf_counter()

    def envelope(self, settings: Mapping[str, Any], figures: Any) -> dict[str, Any]:
        """The document as of now (``load_avg_after`` and ``wall_s`` are taken at this call)."""
        return {"benchmark": self.benchmark, "settings": dict(settings), "machine": self.machine,
                "commit": self.commit, "dirty": self.dirty, "date": self.date,
                "load_avg_before": self.load_avg_before, "load_avg_after": load_avg(),
                "wall_s": round(time.perf_counter() - self._t0, 1), "figures": figures}

    def write(self, path: Path, settings: Mapping[str, Any], figures: Any, indent: int = 1) -> dict[str, Any]:
        """Write the envelope to ``path`` (parents created; replaced atomically) and return it."""
        doc = self.envelope(settings, figures)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=indent, default=_jsonable) + "\n")
        tmp.replace(path)
        return doc


@contextmanager
def run(benchmark: str) -> Iterator[Run]:
    yield Run(benchmark)


def is_envelope(doc: Any) -> bool:
    return isinstance(doc, dict) and set(KEYS) <= set(doc)


def figures(doc: Any) -> Any:
    """The figures of a result document: the envelope's, or the whole document of a file from before it."""
    return doc["figures"] if is_envelope(doc) else doc


def flat(doc: Any) -> Any:
    """An envelope's fields with its figures' keys beside them (for readers written against the figures' own
    top-level keys, e.g. ``settings`` + ``cells``); a document from before the envelope as it is."""
    if not is_envelope(doc) or not isinstance(doc["figures"], dict):
        return doc
    return {**{k: v for k, v in doc.items() if k != "figures"}, **doc["figures"]}


def read(path: Path) -> Any:
    return json.loads(path.read_text())


def _jsonable(value: Any) -> Any:
    """What benchmarks put in their figures besides plain JSON: numpy scalars and arrays, paths."""
    if isinstance(value, Path):
        return str(value)
    for attr in ("tolist", "item"):
        if hasattr(value, attr):
            return getattr(value, attr)()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
